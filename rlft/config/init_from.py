"""`model.init_from`: a stage that starts from an earlier rlft run, checked without importing torch.

The earlier run's folder holds everything needed to rebuild its weights: `config.yaml` (its base
model and, for a chain, its own `init_from`) and `final/` (its adapter and tokenizer). A run counts as
finished when `final/` holds a saved model; rlft writes `final/` under a temporary name and renames it
last, so a half-written one never looks finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlft.config.compose import Composed, Layer
from rlft.config.errors import Problem
from rlft.config.run_config import RunConfigError, read_run_config, value_kind


def run_root(path: str | Path) -> Path:
    """The run folder for a path that names the run or its `final/`."""
    p = Path(path).expanduser()
    return p.parent if p.name == "final" else p


def is_finished(root: Path) -> bool:
    final = root / "final"
    return (final / "adapter_config.json").is_file() or (final / "config.json").is_file()


def read_chain_run(root: Path) -> dict:
    """The resolved config an earlier run saved (plain values; the provenance comments are YAML comments);
    RunConfigError when it is not readable YAML, not a mapping, or its `model` section is not one."""
    data = read_run_config(root)
    if not isinstance(data.get("model", {}), dict):
        raise RunConfigError(f"{root / 'config.yaml'} is damaged: its model section is not a mapping",
                             root / "config.yaml", found=value_kind(data["model"]))
    return data


def config_hash(root: Path) -> str:
    import hashlib  # here: loading OpenSSL costs a few ms of every validate-config, which rarely hashes

    return hashlib.sha256((root / "config.yaml").read_bytes()).hexdigest()[:12]


def _model_of(run_cfg: dict) -> dict[str, Any]:
    model = run_cfg.get("model")
    return model if isinstance(model, dict) else {}


def resolve_init_from(c: Composed, problems: list[Problem]) -> None:
    """Check `model.init_from` and fill in what it implies: the base model and the `init` reference."""
    data = c.data
    model = data.get("model")
    if not isinstance(model, dict) or not model.get("init_from"):
        return
    value = model["init_from"]
    if not isinstance(value, str):
        return  # the type check reports it
    where = c.layer_of("model.init_from")
    root = run_root(value)
    if not root.is_dir():
        problems.append(Problem("model.init_from", where, f"no run folder `{value}`"))
        return
    if not (root / "config.yaml").is_file():
        problems.append(Problem("model.init_from", where, f"`{value}` is not an rlft run folder (no config.yaml)"))
        return
    if not is_finished(root):
        problems.append(Problem("model.init_from", where,
                                f"run `{root}` has not finished (no saved model in {root / 'final'}): finish it with "
                                f"`rlft train ... --resume` first, or point init_from at a finished run"))
        return
    try:
        earlier = _model_of(read_chain_run(root))
    except RunConfigError as exc:
        problems.append(Problem("model.init_from", where, str(exc)))
        return
    implied: dict[str, Any] = {}
    base = earlier.get("name_or_path")
    if c.set_by_user("model.name_or_path") and base is not None and model.get("name_or_path") != base:
        problems.append(Problem("model.name_or_path", c.layer_of("model.name_or_path"),
                                f"`{model.get('name_or_path')}` differs from the base model of init_from run "
                                f"`{root}` (`{base}`); drop model.name_or_path to use that run's base"))
        return
    if base is not None and not c.set_by_user("model.name_or_path"):
        implied["name_or_path"] = base
    if "tiny_init_std" in earlier and not c.set_by_user("model.tiny_init_std"):
        implied["tiny_init_std"] = earlier["tiny_init_std"]  # the same built-in weights the earlier run trained
    if not c.set_by_user("model.ref"):
        implied["ref"] = "init"  # the model this stage starts from, unless the user named another
    implied["init_config_hash"] = config_hash(root)
    model.update(implied)
    model["init_from"] = str(root)
    # a layer of its own, so `show-config --explain` says these values came from init_from
    c.layers.append(Layer(f"implied by model.init_from ({where})", {"model": implied}))


def describe_reference(ref: Any, init_from: Any, init_mode: str) -> str:
    """What the reference weights are, in words (for `show-config --explain`)."""
    if ref in (None, "none", ""):
        return "no reference model"
    if ref == "init":
        if not init_from:
            return "`init` without model.init_from: the base model"
        return f"the model this stage starts from (run {init_from}, its adapter merged), frozen"
    if ref == "base":
        if init_from:
            return "the original base model, before any earlier stage's adapter, frozen"
        return "the base model (this run's adapter disabled), frozen"
    return f"the checkpoint {ref}, frozen"
