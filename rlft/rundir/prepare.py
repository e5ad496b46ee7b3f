"""How a run gets its folder: the folder chosen (a new timestamped one, or the newest matching run for a bare
--resume), its preconditions checked before the model loads (`check_run_dir`), then created or reopened, locked
and config.yaml written (`prepare_run_dir`); --overwrite moves the old run aside (folder.py says what rlft may
delete). Also the command that resumes a run."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

from rlft import run_files
from rlft.config.compose import Composed
from rlft.config.render import render_yaml
from rlft.config.schema import RlftConfig
from rlft.errors import RunError
from rlft.rundir.folder import (LEGACY_HEADER, RUN_KIND, RUN_OWNED, RunDir, aside_path, first_link,
                                is_run_folder)
from rlft.rundir.lock import RunLock
from rlft.rundir.markers import MARKER, encloses_cwd, mark, read_marker
from rlft.rundir.options import RunOptions
from rlft.rundir.resume_keys import config_changes, saved_config


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
    if run.root.is_symlink():  # --overwrite would move the link aside and later delete through it: refused first
        raise RunError(f"run folder {run.root} is a symbolic link (to {os.readlink(run.root)}); rlft does not write a "
                       f"run through a link: set train.output_dir to the folder itself")
    exists = run.root.is_dir() and any(p.name not in (MARKER, run_files.LAUNCH_SBATCH) for p in run.root.iterdir())
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
