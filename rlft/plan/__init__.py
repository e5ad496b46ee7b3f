"""`rlft plan`: the expected peak memory per device of a run, from the resolved config and the model's
config.json alone (no weights loaded, no torch imported).

- `model_shape`: config.json (local folder, Hugging Face cache, or rlft's tiny model) -> `ModelShape`;
- `terms`: pure formulas, bytes of each term from plain numbers;
- `estimate`: a config + shape -> `Plan` (the terms of one stage and hardware profile, grouped into phases);
- `advise`: what to change first, each change re-planned;
- `render`: the text table and the `--json` object.
"""

from __future__ import annotations


def plan_for(cfg, hw: str = ""):
    """The plan of a validated config: its model's shape read from config.json (ShapeError when absent)."""
    from rlft.plan.estimate import make_plan
    from rlft.plan.model_shape import load_shape

    return make_plan(cfg, load_shape(cfg.model.name_or_path, cfg.model.tiny_init_std), hw=hw)
