"""A run folder's config.yaml read back as settings: the one reader behind `--resume`, `eval`/`generate`/
`export`, `rewards try --from-run` and `model.init_from` (torch-free: validate-config's init_from check uses
it). Each caller words a problem its own way from the error's fields."""

from __future__ import annotations

from pathlib import Path

from rlft import run_files

CONFIG_FILE = run_files.CONFIG


def json_kind(value) -> str:
    """What a parsed JSON/YAML value is, in words."""
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


class RunConfigError(ValueError):
    """A run's config.yaml cannot be read as the settings rlft writes there. `path` is the file; `why` the reader's
    first line when it cannot be read or parsed (`missing`: there is no such file), else `found` says what it holds."""

    def __init__(self, message: str, path: Path, *, why: str | None = None, found: str | None = None,
                 missing: bool = False):
        super().__init__(message)
        self.path, self.why, self.found, self.missing = path, why, found, missing


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def read_run_config(root: str | Path, *, empty_ok: bool = True) -> dict:
    """The settings run `root` saved (plain values: the provenance notes are YAML comments). An empty file reads as
    {} unless `empty_ok` is false; RunConfigError when the file is missing, not UTF-8 YAML, or not a mapping."""
    import yaml

    path = Path(root) / CONFIG_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as exc:  # UnicodeDecodeError is a ValueError
        why = _first_line(exc)
        raise RunConfigError(f"cannot read {path}: {why}", path, why=why,
                             missing=isinstance(exc, FileNotFoundError)) from None
    if data is None and empty_ok:
        return {}
    if not isinstance(data, dict):
        raise RunConfigError(f"{path} is damaged: it is not a mapping", path, found=json_kind(data))
    return data
