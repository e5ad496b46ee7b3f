"""Which folders rlft may write, move or delete.

A folder rlft creates (a run, a report, an export, a tiny model) carries a marker file naming what
made it and an id. The marker says which job a folder is for; it is never, alone, proof that the
files in it are rlft's: a marker copies along with a folder, or into one. What rlft may replace in a
folder of its own is fixed by a rule in code, one per kind (`Owned`: the names rlft writes there),
never by a list kept in the folder, which would copy or go stale just like the marker. rlft writes
into a folder the user names only when it is new, empty, or one rlft made before for the same job and
holding nothing but rlft's names; anything else is refused in one line naming the folder and the
first foreign file (or the flag that forces it). A folder that is a symbolic link is refused. Nothing
here imports torch: the checks run before any model loads."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

MARKER = ".rlft-made.json"


class FolderRefused(Exception):
    """rlft may not write to (or replace) a folder; the message names it and what to do."""


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def mark(folder: Path, kind: str, **extra) -> dict:
    """Write the marker into `folder` (created by rlft just now): what made it, an id and when."""
    data = {"kind": kind, "id": new_id(), "created": round(time.time(), 3), **extra}
    write_marker(folder, data)
    return data


def write_marker(folder: Path, data: dict) -> None:
    path = Path(folder) / MARKER
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_marker(folder: Path) -> dict | None:
    """The marker of a folder rlft made (a dict with `kind` and `id`), None for any other folder."""
    try:
        data = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or not isinstance(data.get("id"), str):
        return None
    return data


def made_by_rlft(folder: Path, kind: str) -> bool:
    marker = read_marker(folder)
    return marker is not None and marker["kind"] == kind


@dataclass(frozen=True)
class Owned:
    """The names rlft writes in a folder of one kind (regular expressions, matched whole): `files` are plain
    files, `dirs` folders whose contents are all rlft's, `subdirs` folders checked by their own rule. The
    marker (and its temporary file) always belongs. A symbolic link is never rlft's, whatever its name."""
    files: tuple = ()
    dirs: tuple = ()
    subdirs: dict = field(default_factory=dict)

    def first_foreign(self, folder: Path) -> str | None:
        """The first entry of `folder` (by name; a path relative to it) that rlft does not write there, with
        why when it is a link or not a plain file; None when everything there is rlft's."""
        def matches(patterns, name):
            return any(re.fullmatch(p, name) for p in patterns)

        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            return f". ({exc.strerror or exc})"
        for entry in entries:
            name = entry.name
            if entry.is_symlink():
                return f"{name} (a symbolic link)"
            if entry.is_dir(follow_symlinks=False):
                if name in self.subdirs:
                    inner = self.subdirs[name].first_foreign(Path(folder) / name)
                    if inner is not None:
                        return f"{name}/{inner}"
                elif not matches(self.dirs, name):
                    return f"{name}/"
            elif entry.is_file(follow_symlinks=False):
                if name not in (MARKER, MARKER + ".tmp") and not matches(self.files, name):
                    return name
            else:
                return f"{name} (not a file or folder)"
        return None


def is_empty_dir(folder: Path) -> bool:
    try:
        return Path(folder).is_dir() and not any(Path(folder).iterdir())
    except OSError:
        return False


def encloses_cwd(folder: Path) -> bool:
    """The folder is the working directory or one of its parents: never moved or deleted by rlft."""
    try:
        target, cwd = Path(folder).resolve(), Path.cwd().resolve()
    except OSError:
        return True
    return target == cwd or target in cwd.parents


def claim_output(folder: Path, kind: str, *, force: bool = False, flag: str = "--force",
                 what: str = "output folder", fix: str | None = None, made_before=None,
                 owned: Owned | None = None) -> Path:
    """Decide whether a command may write into the user-named `folder`, before it does any work.

    Allowed: a folder that does not exist (created and marked), an empty one (marked), one that rlft
    made for the same `kind` before (or that `made_before(folder)` recognises, for folders of older
    rlft versions) and that holds only what `owned` names, or any folder with `force` (files of the
    same name are replaced, nothing else is touched, and no marker claims the user's folder).
    Otherwise FolderRefused names the folder (and the first foreign file) and `fix` (by default: the
    flag that forces it). A folder that is a symbolic link is refused, `force` or not."""
    folder = Path(folder)
    if folder.is_symlink():
        raise FolderRefused(f"{what} {folder} is a symbolic link (to {os.readlink(folder)}); rlft does not write "
                            f"through links: give the folder it points to, or another path")
    if folder.exists() and not folder.is_dir():
        raise FolderRefused(f"{what} {folder} is a file, not a folder; choose another path")
    if folder.is_dir() and not is_empty_dir(folder):
        ours = made_by_rlft(folder, kind) or (made_before is not None and made_before(folder))
        foreign = owned.first_foreign(folder) if ours and owned is not None else None
        if (not ours or foreign) and not force:
            fix = fix or (f"choose a new or empty folder, or pass {flag} to write into it (files of the same name "
                          f"are replaced)")
            if foreign:
                raise FolderRefused(f"{what} {folder} holds {foreign}, which rlft {kind} does not write; {fix}")
            raise FolderRefused(f"{what} {folder} is not empty and was not written by rlft {kind}; {fix}")
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    mark(folder, kind)
    return folder


def check_output_file(path: Path, *, force: bool = False, flag: str = "--force", what: str = "output file") -> Path:
    """A file a command will write: refused when it is a folder, or an existing file without `force`."""
    path = Path(path)
    if path.is_dir():
        raise FolderRefused(f"{what} {path} is a folder; give a file path")
    if path.exists() and not force:
        raise FolderRefused(f"{what} {path} already exists; choose another path or pass {flag} to replace it")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise FolderRefused(f"cannot write {what} {path}: {parent} is a file, not a folder")
    return path


def check_name(name: str, key: str) -> str | None:
    """The problem with a name that becomes one path component (a run or stage name), or None."""
    if not isinstance(name, str) or not name.strip():
        return f"{key} must be a non-empty name"
    if "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        return f"{key} `{name}` must be a plain name without path separators (`/`, `\\`) or `..`"
    return None
