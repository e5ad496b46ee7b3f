"""A smoke run's config composed and validated as given, as `rlft train` and `rlft pipeline run` would: any
problem stops it (exit 2), except an error that only this machine causes on a key the smoke run replaces
whatever its value (`MACHINE_KEYS`): a model folder, an earlier run or a reference checkpoint that live on the
real machine, vLLM that only a CUDA machine installs, `auto` learning rates that read a model's config.json.
Such errors are reported as not checked here; the config is validated again with those keys at the values the
smoke run uses, and the typed config keeps the values as given (what the smoke summary says was replaced)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlft.config.compose import Composed, Layer, compose
from rlft.config.errors import ConfigError, Problem
from rlft.smoke.changes import UNCHECKED_LAYER, _get

MACHINE_KEYS: dict[str, Any] = {"model.name_or_path": "tiny", "model.init_from": None, "model.ref": "base"}
NOT_CHECKED = "not checked on this machine (the smoke run replaces it): "


def unchecked(warnings: list[Problem]) -> list[Problem]:
    """The warnings that stand for errors this machine caused (see the module doc)."""
    return [w for w in warnings if w.message.startswith(NOT_CHECKED)]




def _stand_in(key: str, given: Any) -> tuple[bool, Any]:
    """(whether an error on `key` is this machine's, the value validation uses instead)."""
    if key in MACHINE_KEYS:
        return True, MACHINE_KEYS[key]
    if key.endswith(".generation_backend"):
        return True, "transformers"
    if key == "train.learning_rate" and given == "auto":
        from rlft.config.schema import leaf_specs

        return True, leaf_specs()["train.learning_rate"].default
    return False, None


def _stand_ins(problems: list[Problem], given: dict[str, Any]) -> dict[str, Any] | None:
    """{key: stand-in} for every error, or None when an error is not this machine's."""
    out: dict[str, Any] = {}
    for p in problems:
        if p.level != "error":
            continue
        ok, value = _stand_in(p.key, given.get(p.key))
        if not ok:
            return None
        out[p.key] = value
    return out


def _nested(flat: dict[str, Any]) -> dict:
    data: dict = {}
    for key, value in flat.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return data


def _set(cfg, key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    node = cfg
    for part in parents:
        node = getattr(node, part if hasattr(node, part) else f"{part}_")
    setattr(node, leaf, value)


def validate_as_given(build: Callable[[list[Layer]], Composed]):
    """(cfg, composed, warnings): `build(extra_layers)` composes the config; errors this machine caused are
    warnings starting with NOT_CHECKED."""
    import copy

    from rlft.config.validate import validate

    composed = build([])
    raw = copy.deepcopy(composed.data)  # validation fills in and drops values: keep them as given
    stand_ins: dict[str, Any] = {}
    unchecked: list[Problem] = []
    for _ in range(len(MACHINE_KEYS) + 3):  # each round can only reveal checks that earlier errors skipped
        try:
            cfg, warnings = validate(composed, for_train=True)
            break
        except ConfigError as exc:
            errors = [p for p in exc.problems if p.level == "error"]
            more = _stand_ins(errors, {p.key: _get(raw, p.key) for p in errors})
            if not more or not set(more) - set(stand_ins):  # the config's own errors: these stop the smoke run
                raise ConfigError([_note(p) if _stand_in(p.key, _get(raw, p.key))[0] and p.level == "error" else p
                                   for p in exc.problems] + [_note(p) for p in unchecked]) from None
            stand_ins.update(more)
            unchecked += errors
            composed = build([Layer(UNCHECKED_LAYER, _nested(stand_ins))])
    else:
        cfg, warnings = validate(composed, for_train=True)
    for key in stand_ins:
        if key != "train.learning_rate":  # a number is needed to run; the stand-in is what the smoke run uses
            _set(cfg, key, _get(raw, key))
    return cfg, composed, [*warnings, *map(_note, unchecked)]


def _note(p: Problem) -> Problem:
    return Problem(p.key, p.layer, NOT_CHECKED + p.message, "warning", p.stage)


def load_as_given(stage: str, hw: str, files: list[Path], overrides: list[str]):
    """`rlft train --smoke`: (cfg, composed, warnings) of the config as given."""
    return validate_as_given(lambda extra: compose(stage, hw, files, overrides, last=extra))


def check_pipeline_as_given(pipe, overrides: list[str], hw: str):
    """`rlft pipeline run --smoke`: [(entry, cfg, composed, warnings)], every stage checked as `check_pipeline`
    does, each from nothing (the smoke run starts its own chain); ConfigError names each stage."""
    from rlft.pipeline.spec import compose_stage, split_overrides

    common, own, problems = split_overrides(pipe, overrides)
    checked = []
    for entry in pipe.stages:
        def build(extra, entry=entry):
            return compose_stage(pipe, entry, common, own.get(entry.index, []), hw, None, tuple(extra))
        try:
            cfg, composed, warnings = validate_as_given(build)
        except ConfigError as exc:
            problems.extend(p.for_stage(entry.label) for p in exc.problems)
            continue
        checked.append((entry, cfg, composed, [w.for_stage(entry.label) for w in warnings]))
    if any(p.level == "error" for p in problems):
        raise ConfigError(problems)
    return checked
