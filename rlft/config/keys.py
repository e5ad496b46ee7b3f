"""Every config key as the user writes it, read from the schema: `rlft keys [PREFIX]` and the generated
`docs/reference/config.md` (rlft/docs) both print from here, so neither restates a key by hand.

Standard library plus the schema only: no YAML is read and no torch is imported."""

from __future__ import annotations

import difflib
import json
import textwrap
from dataclasses import MISSING, dataclass
from functools import cache
from typing import Any

from rlft.config.schema import RewardConfig, RlftConfig, FieldSpec, leaf_specs
from rlft.config.stages import STAGE_SECTIONS, SPECS


@dataclass(frozen=True)
class Key:
    """One key: its schema spec, and the stage(s) whose runs read it."""
    spec: FieldSpec
    stages: str  # "all stages", "grpo", "ppo, grpo", ...

    @property
    def path(self) -> str:
        return self.spec.path


@cache
def all_keys() -> dict[str, Key]:
    """{dotted key: Key} in config.yaml's order; the items of a list of mappings as `rewards[].fn`."""
    env_stages = ", ".join(s.name for s in SPECS.values() if s.uses_env)
    out: dict[str, Key] = {}
    for path, spec in leaf_specs(RlftConfig).items():
        section = path.partition(".")[0]
        stages = STAGE_SECTIONS.get(section) or (env_stages if section == "env" else "all stages")
        out[path] = Key(spec, stages)
        if path == "rewards":
            for sub, item in leaf_specs(RewardConfig, "rewards[].").items():
                out[sub] = Key(item, "all stages")
    return out


def type_name(spec: FieldSpec) -> str:
    """The YAML type of a key, e.g. `integer`, `list of strings`, `number or null`."""
    names = {int: "integer", float: "number", bool: "boolean", str: "string", dict: "mapping"}
    if spec.type is list:
        item = {str: "strings", int: "integers", float: "numbers"}.get(spec.item_type, "mappings")
        text = f"list of {item}"
    else:
        text = names.get(spec.type, "value")
        if spec.type is not str and spec.type not in names:  # Union[int, str] and the like
            text = "integer or string" if spec.also else "value"
    return text + (" or null" if spec.optional else "")


def format_default(value: Any) -> str:
    """A default as it would be written in YAML (`required` where there is none)."""
    if value is MISSING:
        return "required"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def matching(prefix: str) -> list[Key]:
    """The keys that start with `prefix` (all keys for an empty one), case-insensitively."""
    p = prefix.strip().lower()
    return [k for path, k in all_keys().items() if path.lower().startswith(p)]


def closest(prefix: str, n: int = 5) -> list[str]:
    """The keys nearest to a prefix that matched none: by the whole key and by its first len(prefix) characters."""
    p = prefix.strip().lower()

    def score(path: str) -> float:
        low = path.lower()
        return max(difflib.SequenceMatcher(None, p, low).ratio(),
                   difflib.SequenceMatcher(None, p, low[:len(p)]).ratio())

    ranked = sorted(all_keys(), key=lambda path: (-score(path), path))
    return [path for path in ranked[:n] if score(path) >= 0.5]


def describe(key: Key, width: int = 100) -> str:
    """The lines `rlft keys` prints for one key."""
    s = key.spec
    head = f"{s.path}  ({type_name(s)}, default {format_default(s.default)}; {key.stages})"
    lines = [head, f"    allowed: {s.allowed()}"]
    if s.help:
        lines += textwrap.wrap(s.help, width=width, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)
