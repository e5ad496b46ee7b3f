"""Every stage rlft knows, found in its folder: `rlft/stages/<name>/spec.py` defines `SPEC`, a `StageSpec`
(rlft.config.stagespec) with the stage's config section, checks and what the rest of rlft reads about it.

A stage folder is a plug-in: this module imports each folder's `spec.py` by name (specs import only
`rlft.config.fields`/`stagespec`/`names`, never this module or the schema), so adding a stage is one
folder plus its profile `rlft/configs/stages/<name>.yaml`, and no other file changes."""

from __future__ import annotations

import importlib
from pathlib import Path

from rlft.config.stagespec import StageSpec  # noqa: F401 - re-exported

STAGES_DIR = Path(__file__).resolve().parents[1] / "stages"


def _discover() -> dict[str, StageSpec]:
    specs = []
    for folder in sorted(STAGES_DIR.iterdir()):
        if (folder / "spec.py").is_file():
            spec = importlib.import_module(f"rlft.stages.{folder.name}.spec").SPEC
            assert spec.name == folder.name, f"rlft/stages/{folder.name}/spec.py names stage `{spec.name}`"
            specs.append(spec)
    return {s.name: s for s in sorted(specs, key=lambda s: (s.order, s.name))}


SPECS: dict[str, StageSpec] = _discover()

# `--stage` choices, in the specs' order (the guide's: GRPO first, the preference stages, then the rest)
STAGES: tuple[str, ...] = tuple(SPECS)
DEFAULT_STAGE = STAGES[0]

# `--hw` choices: the profiles in configs/hw/ (kept here beside STAGES so `rlft --help` needs no schema)
HARDWARE: tuple[str, ...] = ("cpu", "mps", "rtx4090", "a100", "ddp", "fsdp")

# Sections that belong to one stage: setting one while training another stage has no effect.
STAGE_SECTIONS: dict[str, str] = {s.section: s.name for s in SPECS.values() if s.section}


def get_spec(stage: str) -> StageSpec:
    """The spec of `stage`; KeyError names the valid stages."""
    try:
        return SPECS[stage]
    except KeyError:
        raise KeyError(f"unknown stage `{stage}`; valid: {', '.join(STAGES)}") from None


def sampling_stages() -> tuple[str, ...]:
    return tuple(s for s in STAGES if SPECS[s].samples)


def stage_sections() -> list[StageSpec]:
    """The specs with a config section, in the order their sections appear in config.yaml."""
    return sorted((s for s in SPECS.values() if s.section_cls is not None), key=lambda s: (s.section_order, s.name))
