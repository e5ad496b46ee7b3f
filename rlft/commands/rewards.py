"""`rlft rewards try`: the config's rewards run on completions without training (reward_try.py beside it does
the work)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer

from rlft.config.stages import DEFAULT_STAGE
from rlft.commands.common import FILES_OPT, HW_OPT, OVERRIDES_ARG, QUIET_OPT, exits, load


def rewards_try(config: Optional[List[Path]] = FILES_OPT, overrides: Optional[List[str]] = OVERRIDES_ARG,
                stage: Optional[str] = typer.Option(None, "--stage", "-s", help="Stage profile (default: the run's, "
                                                                                "else grpo)."),
                hw: str = HW_OPT,
                from_run: Optional[Path] = typer.Option(None, "--from-run", help="Re-score the completions a run "
                                                                                 "logged "
                                                        "(its config, then -c files, set the rewards) and show what "
                                                        "changed."),
                completions: Optional[Path] = typer.Option(None, "--completions", help="A jsonl of {\"row\": {prompt, "
                                                           "columns...} or \"prompt\": ..., \"completion\": ...} "
                                                           "rows."),
                sample: Optional[int] = typer.Option(None, "--sample", min=1, help="Sample N completions per prompt "
                                                     "from the configured model (no training) and score them."),
                max_prompts: int = typer.Option(8, "--max-prompts", min=1, help="With --sample: the first N prompts of "
                                                                                "data.train."),
                out: Optional[Path] = typer.Option(None, "--out", "-o", help="Scored rows, in completions.jsonl's "
                                                   "format (default: runs/rewards-try-<time>/rewards_try.jsonl, a "
                                                   "new folder each call)."),
                force: bool = typer.Option(False, "--force", help="Replace an existing -o file."),
                strict: bool = typer.Option(False, "--strict", help="Exit 4 when a reward fails or has no "
                                                                    "signal."),
                quiet: bool = QUIET_OPT) -> None:
    """Run the config's rewards on completions without training: per-reward statistics, failures with tracebacks,
    time per call, prompts without signal, and a verdict."""
    from rlft.commands.reward_try import check_sources, default_out, run_config_file, run_stage_name, try_rewards

    files, own = list(config or []), None
    if out is None:  # like every run, under runs/, and never over an earlier trial
        out = default_out(Path("runs"))
    with exits():
        check_sources(from_run, completions, sample, out, force, max_prompts)
        # the paths named here, as meant now: a reward's code (imported below) may chdir, which must not move them
        shown, out = out, Path(os.path.abspath(out))
        from_run, completions = (None if p is None else Path(os.path.abspath(p)) for p in (from_run, completions))
        if from_run is not None:  # the run's own config first: its data rows, and its rewards unless -c sets others
            stage = stage or run_stage_name(from_run)
            own = run_config_file(from_run, stage)
            files.insert(0, own)
    try:
        cfg, composed = load(stage or DEFAULT_STAGE, hw, files, overrides, trains=False)  # scores only
    finally:
        if own is not None:
            own.unlink(missing_ok=True)
    with exits():
        code = try_rewards(cfg, composed, from_run=from_run, completions=completions, sample=sample,
                           max_prompts=max_prompts, out=out, strict=strict, echo=typer.echo, force=force,
                           shown=shown)
    raise typer.Exit(code)
