"""`rlft plan`: the peak memory per device, term by term (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rlft.commands.common import FILES_OPT, HW_OPT, OVERRIDES_ARG, QUIET_OPT, STAGE_OPT, auto_hw, err, load


def plan_cmd(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
             overrides: Optional[List[str]] = OVERRIDES_ARG,
             json_out: bool = typer.Option(False, "--json", help="One JSON object: peak_gb, terms, device_gb, "
                                                                 "fits, basis (data or limits), worst_case."),
             quiet: bool = QUIET_OPT) -> None:
    """Plan the peak memory per device, term by term, from the config, the model's config.json and the training
    data's token lengths (no torch); the worst case at the config's limits too."""
    from rlft.plan import plan_for
    from rlft.plan.model_shape import ShapeError
    from rlft.plan.render import report

    hw = auto_hw(hw)
    cfg, composed = load(stage, hw, config, overrides)
    try:
        plan = plan_for(cfg, hw)
    except ShapeError as exc:
        err(f"error: model.name_or_path ({composed.layer_of('model.name_or_path')}): {exc}")
        raise typer.Exit(2)
    typer.echo(report(cfg, plan, json_out))
