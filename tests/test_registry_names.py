"""The torch-free name lists `validate-config` checks against (rlft/config/names.py) are the registries the
training code resolves names with: one changed without the other fails here."""

from __future__ import annotations

from rlft.config import names
from rlft.config.schema import leaf_specs


def test_names_match_the_registries():
    from rlft.algos import AWR_BASELINES, BASELINE_MODES, KEEP_RULES, KL_PENALTIES
    from rlft.data.checks import TOO_LONG_MODES

    assert names.GRPO_BASELINES == BASELINE_MODES
    assert names.AWR_BASELINES == AWR_BASELINES
    assert names.KL_PENALTIES == KL_PENALTIES
    assert names.KEEP_RULES == KEEP_RULES
    assert names.TOO_LONG_MODES == TOO_LONG_MODES


def test_names_match_the_registries_trainers_look_pieces_up_in():
    from rlft.algos import KL_ESTIMATORS, POLICY_LOSSES

    assert names.KL_PENALTIES == KL_ESTIMATORS.names()
    assert names.POLICY_LOSSES == POLICY_LOSSES.names()
    # validate-config's `trl:` checks read which losses clip (rlft/stages/grpo/spec.py's trl_checks)
    assert names.CLIPPED_POLICY_LOSSES == tuple(n for n in POLICY_LOSSES.names() if POLICY_LOSSES.get(n).clipped)
    from rlft.algos import IS_LEVELS, LOSS_AGGREGATIONS

    assert names.LOSS_AGGREGATIONS == LOSS_AGGREGATIONS.names()
    assert names.IS_LEVELS == IS_LEVELS


def test_env_names_match_the_registry_and_the_static_table():
    from rlft.config.env_spec import BUILTIN_ENVS
    from rlft.envs.registry import ENVS

    assert names.ENVS == ENVS.names() == tuple(BUILTIN_ENVS)
    for name in names.ENVS:  # validate-config's table points at the class the registry holds
        cls = ENVS.get(name)
        assert BUILTIN_ENVS[name] == f"{cls.__module__}:{cls.__qualname__}"


def test_the_schema_allows_exactly_those_names():
    specs = leaf_specs()
    assert tuple(specs["awr.baseline"].choices) == names.AWR_BASELINES
    assert tuple(specs["ppo.kl_penalty"].choices) == names.KL_PENALTIES
    assert tuple(specs["rs_sft.keep"].choices) == names.KEEP_RULES
    assert tuple(specs["data.too_long"].choices) == names.TOO_LONG_MODES
    assert tuple(specs["grpo.loss_fn"].choices) == names.POLICY_LOSSES
    assert tuple(specs["grpo.loss_agg"].choices) == names.LOSS_AGGREGATIONS
    assert tuple(specs["grpo.is_level"].choices) == names.IS_LEVELS
    assert all(n in specs["grpo.baseline_mode"].help for n in names.GRPO_BASELINES)
