"""`rlft plan`: the expected peak memory per device of a run, from the resolved config, the model's
config.json and the training data's token lengths (no weights loaded, no torch imported).

- `model_shape`: config.json (local folder, Hugging Face cache, or rlft's tiny model) -> `ModelShape`;
- `lengths`: the training data's rows -> their token lengths (the model's tokenizer.json, else an estimate);
- `terms`: pure formulas, bytes of each term from plain numbers;
- `estimate`: a config + shape (+ lengths) -> `Plan` (the terms of one stage and hardware profile, grouped
  into phases);
- `advise`: what to change first, each change re-planned;
- `render`: the text table and the `--json` object, with the worst case at the config's limits.
"""

from __future__ import annotations


def plan_for(cfg, hw: str = "", from_data: bool = True):
    """The plan of a validated config: its model's shape read from config.json (ShapeError when absent), its
    sequences from the training data where it is readable here (`from_data`), else at the config's limits."""
    from rlft.plan.estimate import make_plan
    from rlft.plan.model_shape import load_shape

    shape = load_shape(cfg.model.name_or_path, cfg.model.tiny_init_std)
    if not from_data:
        return make_plan(cfg, shape, hw=hw)
    from rlft.plan.lengths import read_lengths

    data, why = read_lengths(cfg)
    return make_plan(cfg, shape, hw=hw, data=data, limits_why=why)


def worst_case(plan, cfg):
    """The same plan at the config's limits (the plan itself when it already is)."""
    from rlft.plan.estimate import make_plan

    if plan.data is None:
        return plan
    return make_plan(cfg, plan.shape, plan.device_bytes, plan.device_source, plan.hw)
