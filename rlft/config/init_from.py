"""`model.init_from`: a stage that starts from an earlier rlft run, checked without importing torch.

The earlier run's folder holds everything needed to rebuild its weights: `config.yaml` (its base
model and, for a chain, its own `init_from`) and `final/` (its adapter and tokenizer). A run counts as
finished when `final/` holds a saved model; rlft writes `final/` under a temporary name and renames it
last, so a half-written one never looks finished.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlft.config.compose import Composed, Layer
from rlft.config.errors import Problem
from rlft.config.run_config import RunConfigError, read_run_config, json_kind
from rlft import run_files

if TYPE_CHECKING:
    from rlft.config.schema import ModelConfig


def run_root(path: str | Path) -> Path:
    """The run folder for a path that names the run or its `final/`."""
    p = Path(path).expanduser()
    return p.parent if p.name == "final" else p


def is_finished(root: Path) -> bool:
    final = root / run_files.FINAL
    return (final / "adapter_config.json").is_file() or (final / "config.json").is_file()


def read_chain_run(root: Path) -> dict:
    """The resolved config an earlier run saved (plain values; the provenance comments are YAML comments);
    RunConfigError when it is not readable YAML, not a mapping, or its `model` section is not one."""
    data = read_run_config(root)
    if not isinstance(data.get("model", {}), dict):
        raise RunConfigError(f"{root / run_files.CONFIG} is damaged: its model section is not a mapping",
                             root / run_files.CONFIG, found=json_kind(data["model"]))
    return data


class ChainError(ValueError):
    """An earlier run of an init_from chain cannot be followed (read after validation, when its weights are
    rebuilt); the message names the file or the run."""


def has_adapter(root: Path) -> bool:
    """Whether run `root` saved a LoRA adapter (else its final/ holds a full model)."""
    return (root / run_files.FINAL / "adapter_config.json").is_file()


def _candidates(root: Path, parent: str, moved: bool) -> list[Path]:
    """Where the run `root` started from may be, as its config.yaml records it: an absolute path as it is, and with
    `moved` (the caller checks the recorded hash, so a wrong folder cannot pass) the same run after the runs tree was
    moved or copied: the recorded path's last parts (`01-grpo`, `p/01-grpo`, ...) under each folder above the run
    folder, nearest first. A relative one (older rlft kept it as given, relative to the folder the run was started
    in: a pipeline's working folder) from each folder above the run folder, nearest first, then from the current
    folder."""
    recorded = run_root(parent)
    above = list(Path(os.path.abspath(root)).parents)
    if recorded.is_absolute():
        tails = [Path(*recorded.parts[-k:]) for k in range(1, len(recorded.parts) - 1)] if moved else []
        return list(dict.fromkeys([recorded, *(a / tail for tail in tails for a in above)]))
    return list(dict.fromkeys([*(a / recorded for a in above), Path(os.path.abspath(recorded))]))


def locate_parent(root: Path, model_cfg: dict) -> Path | None:
    """The run `root` started from (`model_cfg`: its config.yaml's model section), checked against the
    `init_config_hash` it recorded: the first candidate folder whose config.yaml has that hash (any that exists
    when none was recorded). None when it started from its base model. ChainError, naming both runs and both hashes,
    when the folder there holds another config (replaced, e.g. by --overwrite, after `root` trained on it: its
    weights are no longer what `root` started from), and when it is gone."""
    parent = model_cfg.get("init_from")
    if parent is None or parent == "":
        return None
    if not isinstance(parent, str):
        raise ChainError(f"{root / run_files.CONFIG} is damaged: its model.init_from is not a path")
    recorded = model_cfg.get("init_config_hash")
    hashed = isinstance(recorded, str) and bool(recorded)
    found = [c for c in _candidates(root, parent, moved=hashed) if (c / run_files.CONFIG).is_file()]
    if not found:
        raise ChainError(f"run {root} started from {parent}, which is gone; the chain's weights cannot be rebuilt "
                         f"without it")
    if not hashed:
        return found[0]
    hashes = {}
    for candidate in found:
        try:
            hashes[candidate] = config_hash(candidate)
        except OSError:
            continue
        if hashes[candidate] == recorded:
            return candidate
    first = found[0]
    now = hashes.get(first, "unreadable")
    raise ChainError(f"run {root} started from run {first} when its config.yaml had hash {recorded} (model."
                     f"init_config_hash in {root / run_files.CONFIG}); it now has hash {now}: {first} was replaced "
                     f"(e.g. by --overwrite) after {root} trained on it, so {root}'s weights cannot be rebuilt as they "
                     f"were trained. Restore that run, or train {root} again from the run there now")


def _chain_model(root: Path) -> dict:
    """The `model` section of run `root`'s config.yaml, its own init_from located and checked (`locate_parent`): the
    returned section's `init_from` is that folder."""
    try:
        model_cfg = read_chain_run(root).get("model") or {}
    except RunConfigError as exc:
        raise ChainError(str(exc)) from None
    parent = locate_parent(root, model_cfg)
    return model_cfg if parent is None else {**model_cfg, "init_from": str(parent)}


def chain_of(root: Path) -> list[Path]:
    """The runs run `root` was built on, nearest first (each located and its hash checked; ChainError otherwise)."""
    out: list[Path] = []
    while True:
        parent = _chain_model(root).get("init_from")
        if not parent:
            return out
        root = run_root(parent)
        if any(os.path.abspath(root) == os.path.abspath(r) for r in out):
            raise ChainError(f"the init_from chain loops back to run {root}")
        out.append(root)


@dataclass(frozen=True)
class Weights:
    """One model of an init_from chain as its runs' folders describe it (read once, torch-free): a base model
    (`name`, built with `tiny_init_std` when it is rlft's `tiny`) or a saved full model (`full`), with `adapters`
    merged into it in order."""

    name: str | None = None
    tiny_init_std: float | None = None
    full: Path | None = None
    adapters: tuple[Path, ...] = ()


def start_weights(root: Path, name: str, tiny_init_std: float) -> Weights:
    """The model run `root` started from (before its own adapter): the base model when it had no init_from (its own
    `name_or_path` and `tiny_init_std`, else these), the weights after its init_from run when it merged that run,
    or that run's start when it continued its adapter. ChainError when a run of the chain cannot be read."""
    model_cfg = _chain_model(root)
    parent = model_cfg.get("init_from")
    if not parent:
        return Weights(name=model_cfg.get("name_or_path") or name,
                       tiny_init_std=model_cfg.get("tiny_init_std", tiny_init_std))
    parent_root = run_root(parent)
    if model_cfg.get("init_mode", "merge") == "continue" and has_adapter(parent_root):
        return start_weights(parent_root, name, tiny_init_std)
    return weights_after(parent_root, name, tiny_init_std)


def weights_after(root: Path, name: str, tiny_init_std: float) -> Weights:
    """The weights after run `root`: its start with its final adapter merged in, or its full model."""
    if not has_adapter(root):
        return Weights(full=root / run_files.FINAL)
    start = start_weights(root, name, tiny_init_std)
    return replace(start, adapters=(*start.adapters, root / run_files.FINAL))


def starts_from_base(root: Path) -> bool:
    """Whether run `root` started from the plain base model (so disabling its adapter gives the base)."""
    return not _chain_model(root).get("init_from")


@dataclass(frozen=True)
class InitRun:
    """`model.init_from` as model loading needs it, read once: the earlier run's folder, whether the policy carries
    that run's adapter (`init_mode: continue` with an adapter saved) rather than its merged weights, and the base
    model (`model.name_or_path`, `model.tiny_init_std`) a chain without its own falls back on."""

    root: Path
    continues: bool
    name: str
    tiny_init_std: float

    @property
    def final(self) -> Path:
        return self.root / run_files.FINAL

    def start(self) -> Weights:
        return start_weights(self.root, self.name, self.tiny_init_std)

    def after(self) -> Weights:
        return weights_after(self.root, self.name, self.tiny_init_std)

    def starts_from_base(self) -> bool:
        return starts_from_base(self.root)


def init_run(model: ModelConfig) -> InitRun | None:
    """The run a stage starts from (`model`: the config's model section), or None without `model.init_from`."""
    if not model.init_from:
        return None
    root = run_root(model.init_from)
    return InitRun(root, model.init_mode == "continue" and has_adapter(root), model.name_or_path,
                   model.tiny_init_std)


def config_hash(root: Path) -> str:
    import hashlib  # here: loading OpenSSL costs a few ms of every validate-config, which rarely hashes

    return hashlib.sha256((root / run_files.CONFIG).read_bytes()).hexdigest()[:12]


def _model_of(run_cfg: dict) -> dict[str, Any]:
    model = run_cfg.get("model")
    return model if isinstance(model, dict) else {}


def _get_output_dir(data: dict) -> str | None:
    train = data.get("train")
    out = train.get("output_dir") if isinstance(train, dict) else None
    return out if isinstance(out, str) and out else None


def _same_folder(a: Path, b: str | Path) -> bool:
    """Whether two paths name one folder (through links too, when both exist)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


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
    if not (root / run_files.CONFIG).is_file():
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
    try:
        chain = [root, *chain_of(root)]  # every earlier run located and its recorded hash checked, before training
    except ChainError as exc:
        problems.append(Problem("model.init_from", where, str(exc)))
        return
    out = _get_output_dir(data)
    clash = next((r for r in chain if out is not None and _same_folder(r, out)), None)
    if clash is not None:
        via = "" if clash == root else f" (`{value}` started from it)"
        problems.append(Problem("train.output_dir", c.layer_of("train.output_dir"),
                                f"`{out}` is run {clash} of model.init_from's chain{via}: this run would replace the "
                                f"weights it starts from (--overwrite moves that folder away before they load); set "
                                f"train.output_dir to another folder"))
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
    # by absolute path: the run's config.yaml is read again from other folders (eval, generate, a later stage)
    model["init_from"] = os.path.abspath(root)
    # a layer of its own, so `show-config --explain` says these values came from init_from
    c.layers.append(Layer(f"implied by model.init_from ({where})", {"model": implied}))
