"""The run folder every stage writes: resolved config, metrics, completions, checkpoints, final model.

    <train.output_dir>/
      config.yaml         resolved config, each key with the layer that set it
      metrics.jsonl       one JSON object per logged step
      completions.jsonl   sampled completions with each reward's score (sampling stages)
      health.jsonl        every health-rule firing (written, possibly empty, by every stage)
      checkpoints/        rolling, resumable checkpoints (checkpoint-<step>)
      final/              PEFT adapter (or full model) + tokenizer
      .rlft.lock          pid and host of the run using the folder (exclusive, for the life of the run)
      .rlft-made.json     marker written at creation: kind "run", the run's id, and the id of the run it
                          replaces (--overwrite); rlft moves or deletes only folders that carry it

The marker is not proof that the folder's files are rlft's (it copies along with a folder): RUN_OWNED names
every file and folder rlft writes here. --overwrite deletes a run (later, from `<name>.old`) only when it holds
nothing else; a run folder holding anything else, a link included, is moved aside whole to
`<name>.replaced-<time>` and never deleted. --resume needs a config.yaml that rlft wrote and refuses links.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlft.config.compose import Composed, flatten
from rlft.config.render import render_yaml
from rlft.config.schema import RlftConfig, config_key
from rlft.folders import MARKER, Owned, encloses_cwd, mark, read_marker, write_marker
from rlft.run_config import RunConfigError, read_run_config

LOCK_NAME = ".rlft.lock"
RUN_KIND = "run"
LEGACY_HEADER = "# rlft resolved config"  # the first line of config.yaml in run folders of rlft before the marker

# every name rlft (and the libraries it runs, pointed here) writes at the top of a run folder; a rule in code,
# so nothing copied into a folder can widen what rlft deletes. `.tmp`: the files written by rename.
_RUN_FILES = (r"config\.yaml", r"config\.step-\d+\.yaml", r"metrics\.jsonl", r"completions\.jsonl",
              r"eval_completions\.jsonl", r"health\.jsonl", r"reward_logs\.jsonl", r"samples\.jsonl",
              r"summary\.json", r"distributed\.json", r"rounds\.json", r"overrides\.yaml", r"launch\.sbatch",
              r"eval\.jsonl", r"\.rlft\.lock", r"\.rlft-eval-config\.yaml")
RUN_OWNED = Owned(files=(*_RUN_FILES, *(f + r"\.tmp" for f in _RUN_FILES), r"\.rlft-eval-config\.yaml\..+\.tmp"),
                  dirs=("checkpoints", "final", r"final\.tmp", "report", "tensorboard", "wandb"))


@dataclass
class RunOptions:
    resume: bool = False
    overwrite: bool = False
    verbose: bool = False
    allow_config_change: bool = False
    argv: list = field(default_factory=list)  # the command's arguments, for the printed resume command
    resume_hint: str | None = None  # the resume command when the run is part of something larger (a pipeline)


class RunError(Exception):
    """A run cannot start or continue; the message says why and what to do."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def describe_holder(holder: dict | None) -> str:
    if not holder:
        return "an unknown process"
    return f"pid {holder.get('pid')} on host {holder.get('host')}"


class RunLock:
    """Exclusive lock on a run folder: an flock'ed file holding the holder's pid and host.

    The kernel drops an flock when its process dies, so a lock left by a killed run is recognised
    as stale without guessing; the pid/host inside are for the error message and the take-over note."""

    def __init__(self, root: Path):
        self.path = Path(root) / LOCK_NAME
        self._fd: int | None = None

    def _read(self) -> dict | None:
        try:
            return json.loads(self.path.read_text() or "null")
        except (OSError, ValueError):
            return None

    def _busy(self) -> RunError:
        return RunError(f"run folder {self.path.parent} is in use by another rlft run "
                        f"({describe_holder(self._read())}, "
                        f"lock file {self.path}); wait for it to finish or stop it, or use another train.output_dir")

    def check_free(self) -> None:
        """RunError naming the holder when a live run holds the lock; takes nothing (a probe before loading)."""
        import fcntl

        if not self.path.is_file():
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise self._busy() from None
        finally:
            os.close(fd)  # closing drops a lock this probe took

    def acquire(self) -> "RunLock":
        import fcntl

        for _ in range(5):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise self._busy() from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the holder released (unlinked) it between our open and flock: try again
                os.close(fd)
                continue
            old = self._read()
            if old and old.get("pid") != os.getpid():
                print(f"rlft: taking over a stale lock on {self.path.parent}: {describe_holder(old)} ended "
                      f"without releasing it", file=sys.stderr)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                      "started": round(time.time(), 3)}).encode(), 0)
            self._fd = fd
            return self
        raise RunError(f"could not lock run folder {self.path.parent}: its lock file keeps changing")

    def moved_to(self, root: Path) -> None:
        """The locked folder was renamed: the open lock follows the file."""
        self.path = Path(root) / LOCK_NAME

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink()  # unlink before closing: a waiter that opened the old file retries
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None


@dataclass
class RunDir:
    root: Path
    lock: RunLock | None = field(default=None, repr=False, compare=False)

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def completions(self) -> Path:
        return self.root / "completions.jsonl"

    @property
    def eval_completions(self) -> Path:
        """Each evaluation's samples of the fixed evaluation prompts (`eval-<i>` rows; the report shows them with
        the training completions)."""
        return self.root / "eval_completions.jsonl"

    @property
    def health(self) -> Path:
        return self.root / "health.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def final(self) -> Path:
        return self.root / "final"

    @property
    def marker(self) -> dict | None:
        return read_marker(self.root)

    @property
    def replaced(self) -> Path | None:
        """The run this one replaces (--overwrite), kept as `<name>.old` until this run's first checkpoint.

        The path is computed, never read from a file, and the folder there must carry the marker of the
        very run this one replaced: a copied or edited run folder cannot point rlft at anything else."""
        mine = self.marker
        wanted = mine.get("replaces") if mine else None
        if not wanted:
            return None
        old = aside_path(self.root)
        theirs = read_marker(old)
        return old if theirs is not None and theirs["kind"] == RUN_KIND and theirs["id"] == wanted else None

    def drop_replaced(self) -> None:
        """This run has shown it works (a checkpoint or its final model is on disk): delete the old run."""
        mine = self.marker
        if not mine or not mine.get("replaces"):
            return
        old = self.replaced
        foreign = RUN_OWNED.first_foreign(old) if old is not None else None
        if foreign is not None:
            print(f"rlft: kept the replaced run {old}: it holds {foreign}, which rlft did not write; delete it "
                  f"yourself once you have what you need from it", file=sys.stderr)
        elif old is not None:
            shutil.rmtree(old)
            print(f"rlft: deleted the replaced run {old} (this run has written a checkpoint)", file=sys.stderr)
        mine.pop("replaces")
        write_marker(self.root, mine)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    @property
    def samples(self) -> Path:
        return self.root / "samples.jsonl"

    def complete_checkpoints(self) -> list[Path]:
        """Checkpoints whose save finished (rlft writes its marker last), oldest first."""
        if not self.checkpoints.is_dir():
            return []
        found = [p for p in self.checkpoints.glob("checkpoint-*") if (p / COMPLETE_MARKER).is_file()]
        return sorted(found, key=checkpoint_step)


COMPLETE_MARKER = "rlft_complete"


def checkpoint_step(path: Path) -> int:
    """The step of `checkpoint-<step>`, -1 for any other name."""
    try:
        return int(path.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def default_output_dir(stage: str) -> str:
    return f"runs/{stage}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_writable(folder: Path, what: str = "run folder", key: str = "train.output_dir") -> None:
    """RunError (one line, exit 2) unless `folder` exists and can be written, or can be created.

    Asked of the kernel (access and the mount's read-only flag), not probed with a file: nothing is
    written anywhere before the command has decided it may write there."""
    folder = Path(folder)
    probe_in = folder
    while not probe_in.exists():
        if probe_in.parent == probe_in:
            break
        probe_in = probe_in.parent
    if probe_in.exists() and not probe_in.is_dir():
        raise RunError(f"cannot create {what} {folder}: {probe_in} is a file, not a folder; set {key} elsewhere")
    reason = None
    try:
        if os.statvfs(probe_in).f_flag & os.ST_RDONLY:
            reason = "read-only file system"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    if reason is None and not os.access(probe_in, os.W_OK | os.X_OK):
        reason = "permission denied"
    if reason:
        raise RunError(f"cannot write the {what} {folder}: {probe_in} is not writable ({reason}); "
                       f"set {key} to a folder you can write to")


def aside_path(root: Path) -> Path:
    return root.with_name(root.name + ".old")


def is_run_folder(root: Path) -> bool:
    """A folder rlft made for a run: its marker, or (older rlft) a config.yaml with rlft's header."""
    marker = read_marker(root)
    if marker is not None:
        return marker["kind"] == RUN_KIND
    try:
        with open(Path(root) / "config.yaml", encoding="utf-8", errors="replace") as fh:
            return fh.readline().startswith(LEGACY_HEADER)
    except OSError:
        return False


def _not_a_run(root: Path, opts: RunOptions) -> RunError:
    if opts.resume:
        return RunError(f"nothing to resume: {root} is not an rlft run folder (it has no {MARKER}); set "
                        f"train.output_dir to the run folder to continue")
    if opts.overwrite:
        return RunError(f"refusing to --overwrite {root}: it is not an rlft run folder (rlft replaces only folders "
                        f"it created); set train.output_dir to a new or empty folder")
    return RunError(f"run folder {root} already exists, is not empty and is not an rlft run folder; set "
                    f"train.output_dir to a new or empty folder")


def _run_dir_for(cfg: RlftConfig, opts: RunOptions) -> RunDir:
    """The run folder this run uses (the newest matching run for a bare --resume, else a new timestamped
    one when train.output_dir is unset), checked to be writable; sets train.output_dir."""
    if opts.resume and opts.overwrite:  # first: before a bare --resume goes looking for a run
        raise RunError("--resume and --overwrite contradict each other; pick one")
    if cfg.train.output_dir is None and opts.resume and not os.environ.get("RLFT_LAUNCHED"):
        cfg.train.output_dir = str(find_run_to_resume(cfg, opts.argv))
        print(f"rlft: --resume: continuing {cfg.train.output_dir}, the newest {cfg.stage} run with this config",
              file=sys.stderr)
    if cfg.train.output_dir is None:
        cfg.train.output_dir = default_output_dir(cfg.stage)
    run = RunDir(Path(cfg.train.output_dir))
    check_writable(run.root)
    return run


def _check_existing(run: RunDir, opts: RunOptions) -> bool:
    """The preconditions on the folder as it is (nothing written): True when it exists and is not empty."""
    # a folder `rlft train --dry-run` prepared for a SLURM job holds only the marker and the script: a new run
    exists = run.root.is_dir() and any(p.name not in (MARKER, "launch.sbatch") for p in run.root.iterdir())
    if run.root.exists() and not run.root.is_dir():
        raise RunError(f"run folder {run.root} is a file; set train.output_dir to a folder")
    if exists and not is_run_folder(run.root):
        raise _not_a_run(run.root, opts)
    if exists:
        RunLock(run.root).check_free()  # a live run there: say so first, whatever the flags
    if opts.resume and not exists:
        raise RunError(f"nothing to resume: run folder {run.root} does not exist or is empty "
                       f"(drop --resume to start a new run)")
    if opts.resume:
        _check_resumable(run)
    if not opts.resume and exists and not opts.overwrite:
        raise RunError(f"run folder {run.root} already exists and is not empty: pass --resume to continue it "
                       f"or --overwrite to replace it (or set train.output_dir)")
    if opts.overwrite and exists and encloses_cwd(run.root):
        raise RunError(f"refusing to --overwrite {run.root}: it is the current folder or one above it; set "
                       f"train.output_dir to a folder below it")
    return exists


def first_link(root: Path) -> str | None:
    """A symbolic link where a resumed run writes (the run folder, checkpoints/ and the folders in it), or None."""
    root = Path(root)
    places = [root, root / "checkpoints"]
    if (root / "checkpoints").is_dir() and not (root / "checkpoints").is_symlink():
        places += [p for p in (root / "checkpoints").iterdir() if p.is_dir() and not p.is_symlink()]
    for place in places:
        if not place.is_dir() or place.is_symlink():
            continue
        for p in sorted(place.iterdir()):
            if p.is_symlink():
                return str(p.relative_to(root))
    return None


def _check_resumable(run: RunDir) -> None:
    """--resume continues only a run rlft started there: its config.yaml (rlft's header first), or, with that
    deleted, a complete checkpoint; and no link where the run writes. The marker alone is not enough."""
    config = run.config
    if config.is_symlink() or config.exists():
        try:
            ours = config.is_file() and not config.is_symlink() and config.read_text(
                encoding="utf-8", errors="replace").startswith(LEGACY_HEADER)
        except OSError:
            ours = False
        if not ours:
            raise RunError(f"nothing to resume: {config} is not a config.yaml rlft wrote (a run's starts with "
                           f"`{LEGACY_HEADER}`); set train.output_dir to the run folder to continue")
    elif not run.complete_checkpoints():
        raise RunError(f"nothing to resume: {run.root} has no config.yaml and no checkpoint (no run was started "
                       f"there); set train.output_dir to the run folder to continue")
    link = first_link(run.root)
    if link is not None:
        raise RunError(f"cannot --resume {run.root}: {link} is a symbolic link, and rlft does not write through "
                       f"links in a run folder; remove it (or replace it with the folder itself)")


def check_run_dir(cfg: RlftConfig, opts: RunOptions) -> RunDir:
    """The run folder's preconditions (--resume needs an rlft run, a new run needs none or --overwrite on an
    rlft run, the place is writable), checked without creating anything: called before the model and data
    load, so a run that fails while loading leaves nothing behind. `prepare_run_dir` creates it afterwards."""
    run = _run_dir_for(cfg, opts)
    if os.environ.get("RLFT_LAUNCHED"):
        return run
    _check_existing(run, opts)
    return run


def _replace(run: RunDir) -> None:
    """--overwrite of an rlft run: move it aside to `<name>.old` (deleted at the new run's first checkpoint)
    and create the new folder, marked with the id of the run it replaces."""
    held = RunLock(run.root).acquire()  # refuses a folder a live run is using, before touching it
    old = aside_path(run.root)
    current = read_marker(run.root) or {}
    foreign = RUN_OWNED.first_foreign(run.root)
    if foreign is not None:  # not only rlft's files: nothing here is rlft's to delete, now or later
        base = run.root.with_name(f"{run.root.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        keep, n = base, 1
        while keep.exists() or keep.is_symlink():
            keep, n = base.with_name(f"{base.name}-{n}"), n + 1
        run.root.rename(keep)
        held.moved_to(keep)
        held.release()
        print(f"rlft: --overwrite: {run.root} holds {foreign}, which rlft did not write: moved the whole folder to "
              f"{keep}; nothing in it is deleted", file=sys.stderr)
        replaces = None  # a folder of the user's: the new run replaces no rlft run
    elif old.exists() and current.get("replaces") and run.replaced is not None:
        # an earlier replacement that never wrote a checkpoint: nothing in it to keep; the run it
        # replaced stays in <name>.old until this run's first checkpoint
        replaces = current["replaces"]
        held.release()
        shutil.rmtree(run.root)
        print(f"rlft: --overwrite: removed {run.root} (an earlier replacement that wrote no checkpoint); "
              f"{old} is kept until this run writes its first checkpoint", file=sys.stderr)
    elif old.exists():
        held.release()
        raise RunError(f"cannot --overwrite {run.root}: {old} already exists; delete or rename it first")
    else:
        if not current:  # a run of an older rlft: give it an id so the new run can check what it deletes
            current = mark(run.root, RUN_KIND)
        replaces = current["id"]
        # moved aside, not deleted: if the new run fails before its first checkpoint the old one is still there
        run.root.rename(old)
        held.moved_to(old)
        held.release()
        print(f"rlft: --overwrite: moved the existing run to {old}; it is deleted once this run writes its "
              f"first checkpoint", file=sys.stderr)
    run.root.mkdir(parents=True)
    mark(run.root, RUN_KIND, **({} if replaces is None else {"replaces": replaces}))
    run.lock = RunLock(run.root).acquire()


def prepare_run_dir(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> RunDir:
    """Create (or reopen for --resume) the run folder, lock it and write config.yaml before training starts."""
    run = _run_dir_for(cfg, opts)
    if os.environ.get("RLFT_LAUNCHED"):  # the launching process already checked, created and locked it
        run.root.mkdir(parents=True, exist_ok=True)
        run.checkpoints.mkdir(exist_ok=True)
        return run
    exists = _check_existing(run, opts)  # again: the folder may have changed while the model loaded
    if opts.resume:
        run.lock = RunLock(run.root).acquire()
        if read_marker(run.root) is None:
            mark(run.root, RUN_KIND)
    elif exists:
        _replace(run)
    else:
        run.root.mkdir(parents=True, exist_ok=True)
        mark(run.root, RUN_KIND)
        run.lock = RunLock(run.root).acquire()
    try:
        run.checkpoints.mkdir(exist_ok=True)
        text = render_yaml(cfg, composed)
        if not opts.resume or not run.config.exists():
            run.config.write_text(f"{LEGACY_HEADER}; each key notes the layer that set it\n{text}")
    except BaseException:
        run.release()
        raise
    return run


# keys a resume may change without --allow-config-change: where the run folder is, how far to train,
# how often to save and log
RESUME_FREE = ("train.output_dir", "train.max_steps", "train.save_steps", "train.save_total_limit",
               "train.logging_steps")
RESUME_FREE_SECTIONS = ("slurm",)  # how the job is scheduled, not what it trains


def saved_config(root: Path) -> dict | None:
    """A run folder's config.yaml as a dict (None when missing, empty or unreadable)."""
    try:
        return read_run_config(root, empty_ok=False)
    except RunConfigError:
        return None


def config_changes(old: dict, cfg: RlftConfig) -> list[tuple[str, object, object]]:
    """(key, saved value, new value) for each setting that differs from a run's saved config. Left out:
    RESUME_FREE keys, other stages' sections, keys the saved config predates (at their default) or lost."""
    from rlft.config.schema import to_dict

    from rlft.config.schema import STAGES
    from rlft.config.stages import get_spec

    a, b = _leaves(old), _leaves(to_dict(cfg))
    other_sections = {get_spec(s).section for s in STAGES} - {get_spec(cfg.stage).section}
    out = []
    for key in sorted(set(a) | set(b), key=lambda k: (k.split(".")[0] == "rewards", k)):
        section = key.split(".", 1)[0]
        if key in RESUME_FREE or section in other_sections or section in RESUME_FREE_SECTIONS or key not in b:
            continue
        if key not in a and _plain(b[key]) == _plain(_schema_default(key)):
            continue  # a setting newer than the saved config, at its default
        if _plain(a.get(key)) != _plain(b[key]):
            out.append((key, a.get(key), b[key]))
    return out


def _leaves(data: dict) -> dict:
    """flatten(), with lists of sections (rewards) expanded by index: rewards.0.weight."""
    out = {}
    for key, value in flatten(data).items():
        if isinstance(value, dict) and value:
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                out.update(_leaves({f"{key}.{i}": item}))
            out[f"{key}.count"] = len(value)
            continue
        out[key] = value
    return out


_NO_DEFAULT = object()


def _schema_default(key: str):
    """The schema default of a dotted key (list indices skipped), or a sentinel when it has none."""
    import dataclasses
    import typing

    cls, parts = RlftConfig, [p for p in key.split(".") if not p.isdigit()]
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            return _NO_DEFAULT
        fields = {config_key(f.name): f for f in dataclasses.fields(cls)}
        if part not in fields:
            return _NO_DEFAULT
        if i == len(parts) - 1:
            f = fields[part]
            if f.default is not dataclasses.MISSING:
                return f.default
            return f.default_factory() if f.default_factory is not dataclasses.MISSING else _NO_DEFAULT
        hint = typing.get_type_hints(cls)[fields[part].name]
        cls = typing.get_args(hint)[0] if typing.get_origin(hint) is list else hint
    return _NO_DEFAULT


def _plain(value):
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def resume_command(root: Path, argv: list[str]) -> str:
    """The exact command that continues this run: the same arguments, the run folder pinned, --resume."""
    keep = [a for a in argv if a not in ("--overwrite", "--resume", "--allow-config-change")
            and not a.startswith("train.output_dir=")]
    if not keep or keep[0] != "train":
        keep = ["train", *keep]
    return shlex.join(["rlft", *keep, f"train.output_dir={root}", "--resume"])


def _default_run_names(parent: Path, stage: str) -> list[Path]:
    pattern = re.compile(rf"{re.escape(stage)}-\d{{8}}-\d{{6}}")
    found = [p for p in parent.glob(f"{stage}-*") if p.is_dir() and pattern.fullmatch(p.name)]
    return sorted(found, key=lambda p: p.name, reverse=True)  # newest first: the names are timestamps


def find_run_to_resume(cfg: RlftConfig, argv: list[str]) -> Path:
    """--resume without train.output_dir: the newest runs/<stage>-<timestamp> whose config matches."""
    parent = Path(default_output_dir(cfg.stage)).parent
    runs = _default_run_names(parent, cfg.stage)
    if not runs:
        raise RunError("nothing to resume: train.output_dir is not set and there is no "
                       f"{parent}/{cfg.stage}-<timestamp> "
                       f"run here (drop --resume to start a new run, or set train.output_dir=<run folder>)")
    for root in runs:
        old = saved_config(root)
        if old is not None and not config_changes(old, cfg):
            return root
    newest = runs[0]
    diff = [k for k, _, _ in config_changes(saved_config(newest) or {}, cfg)]
    raise RunError(f"nothing to resume: no run in {parent}/ has this config. The newest {cfg.stage} run, {newest}, "
                   f"differs in {', '.join(diff[:10])}{' ...' if len(diff) > 10 else ''}; to continue it anyway: "
                   f"{resume_command(newest, argv)} --allow-config-change")
