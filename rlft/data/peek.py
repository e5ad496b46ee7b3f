"""Cheap look at a data file: its columns, row count and first rows.

``rlft validate-config`` uses this to check that configured columns exist
before anything heavy is imported, so JSON and CSV are read with the
standard library and pyarrow is imported only for parquet and saved
datasets. It also finds problems ``datasets`` reports poorly, such as the
line number of a broken JSON Lines record.
"""

from __future__ import annotations

import csv
import difflib
import json
import json.decoder
import json.scanner
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlft.data.errors import DataError

__all__ = ["TableInfo", "peek_columns", "check_columns", "json_layout", "check_data_path", "SUPPORTED_FORMATS"]

# what error messages list as readable
SUPPORTED_FORMATS = ".jsonl, .json, .csv, .parquet, or a folder written by datasets' save_to_disk"

# suffixes mapped to the reader that handles them
_READERS = {".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet"}

# how many rows TableInfo.first_rows holds by default
_DEFAULT_ROWS = 5


@dataclass
class TableInfo:
    """Columns (in first-seen order), row count (None when unknown) and a few rows."""

    columns: list[str]
    num_rows: int | None
    first_rows: list[dict[str, Any]] = field(default_factory=list)


def check_data_path(path: str | Path) -> str:
    """Fail early on a missing, empty or unsupported path; return its reader kind."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"data file not found: {path}")
    if p.is_dir():
        return "folder"
    kind = _READERS.get(p.suffix.lower())
    if kind is None:
        suffix = p.suffix or "(no extension)"
        raise DataError(f"unsupported data file type {suffix!r} for {path}; supported: {SUPPORTED_FORMATS}")
    if p.stat().st_size == 0:
        raise DataError(f"data file is empty: {path}")
    return kind


def _union_columns(rows: Iterable[dict[str, Any]]) -> list[str]:
    """All keys across rows, in first-seen order, as ``datasets`` infers them."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def _read_text(path: Path) -> str:
    """File text as UTF-8 (a BOM is tolerated), with a clear error otherwise."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text: {exc}") from exc


class _DuplicateKey(ValueError):
    """A JSON object that names one key twice; `pos` (where known) is the object's offset in the text."""

    def __init__(self, key: str, pos: int | None = None):
        super().__init__(key)
        self.key, self.pos = key, pos


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: JSON readers (json, pyarrow) silently keep one value of a repeated key."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return obj


def _duplicate_message(path: Path, line: int | None, key: str) -> str:
    where = f"line {line}: " if line else ""
    return (f"{path}: {where}key {key!r} appears twice in one JSON object; JSON readers keep one of the values "
            f"and drop the other silently: rename or remove one")


def _deepest_line(text: str) -> tuple[int, int]:
    """(1-based line where the nesting of `[`/`{` outside strings first reaches its maximum, that depth)."""
    depth = best = 0
    line = best_line = 1
    in_string = escaped = False
    for ch in text:
        if ch == "\n":
            line += 1
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > best:
                best, best_line = depth, line
        elif ch in "]}":
            depth -= 1
    return best_line, best


def _too_deep_message(path: Path, text: str, first_line: int = 1) -> str:
    line, depth = _deepest_line(text)
    return (f"{path}: line {first_line + line - 1} nests {depth} levels of lists/objects, deeper than a JSON reader "
            f"can follow; a data row is a flat object of text, numbers and chat messages")


_loads = json.JSONDecoder(object_pairs_hook=_unique_keys).decode  # one decoder: json.loads(hook=) builds one a call


def _iter_jsonl(path: Path, text: str) -> Iterator[dict[str, Any]]:
    """Parse JSON Lines, naming the file and 1-based line of the first bad record."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = _loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: line {lineno} is not valid JSON: {exc.msg} (column {exc.colno})") from exc
        except _DuplicateKey as exc:
            raise DataError(_duplicate_message(path, lineno, exc.key)) from None
        except RecursionError:
            raise DataError(_too_deep_message(path, line, lineno)) from None
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {lineno} is not a JSON object (got {type(record).__name__})")
        yield record


def _records(path: Path, items: Any, where: str) -> list[dict[str, Any]]:
    """Check that a JSON array holds objects only."""
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(f"{path}: {where}[{i}] is not a JSON object (got {type(item).__name__})")
    return items


def json_layout(path: str | Path) -> str:
    """How a ``.json`` file stores its rows: 'records' (a list), 'data' ({"data": [...]}) or 'lines'.

    ``datasets`` needs ``field="data"`` for the second form and reads JSON
    Lines saved as ``.json`` as-is, so the loader asks here first.
    """
    return _parse_json(Path(path))[0]


def _parse_json(path: Path) -> tuple[str, list[dict[str, Any]]]:
    """Parse a ``.json`` file into (layout, rows)."""
    text = _read_text(path)
    if not text.strip():
        raise DataError(f"data file is empty: {path}")
    try:
        data = _loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            # several top-level values: JSON Lines under a .json name
            return "lines", list(_iter_jsonl(path, text))
        raise DataError(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from exc
    except _DuplicateKey as exc:
        raise DataError(_duplicate_message(path, _duplicate_line(text), exc.key)) from None
    except RecursionError:
        raise DataError(_too_deep_message(path, text)) from None
    if isinstance(data, list):
        return "records", _records(path, data, "item")
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        return "data", _records(path, data["data"], "data")
    if isinstance(data, dict):
        # a single object on one line is a one-row JSON Lines file
        return "lines", [data]
    raise DataError(f"{path}: expected a JSON list of objects or {{\"data\": [...]}}, got {type(data).__name__}")


def _duplicate_line(text: str) -> int | None:
    """The line of the first object with a repeated key: a second pass with the pure-Python scanner, whose
    object parser is told where each object ends (the C scanner tells nobody)."""
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys)

    def parse_object(s_and_end, *args):
        try:
            return json.decoder.JSONObject(s_and_end, *args)
        except _DuplicateKey as exc:
            raise _DuplicateKey(exc.key, s_and_end[1] if exc.pos is None else exc.pos) from None

    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    try:
        decoder.decode(text)
    except _DuplicateKey as exc:
        return text.count("\n", 0, exc.pos) + 1 if exc.pos is not None else None
    except (ValueError, RecursionError):
        return None
    return None


def _peek_jsonl(path: Path, n_rows: int) -> TableInfo:
    text = _read_text(path)
    rows = list(_iter_jsonl(path, text))
    if not rows:
        raise DataError(f"data file is empty: {path}")
    return TableInfo(_union_columns(rows), len(rows), rows[:n_rows])


def _peek_json(path: Path, n_rows: int) -> TableInfo:
    _, rows = _parse_json(path)
    return TableInfo(_union_columns(rows), len(rows), rows[:n_rows])


def _peek_csv(path: Path, n_rows: int) -> TableInfo:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None:
                raise DataError(f"data file is empty: {path}")
            repeated = [c for i, c in enumerate(reader.fieldnames) if c in reader.fieldnames[:i]]
            if repeated:  # DictReader keeps the last of same-named columns and drops the rest silently
                raise DataError(f"{path}: line 1: column {repeated[0]!r} appears twice in the header; rename or "
                                f"remove one")
            first: list[dict[str, Any]] = []
            count = 0
            for row in reader:
                if count < n_rows:
                    first.append(dict(row))
                count += 1
            return TableInfo(list(reader.fieldnames), count, first)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text: {exc}") from exc
    except csv.Error as exc:
        raise DataError(f"{path}: malformed CSV: {exc}") from exc


def _peek_parquet(path: Path, n_rows: int) -> TableInfo:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - pyarrow ships with datasets
        raise DataError(f"reading {path} needs pyarrow (pip install pyarrow)") from exc
    try:
        pf = pq.ParquetFile(path)
        first: list[dict[str, Any]] = []
        if pf.metadata.num_rows and n_rows:
            first = next(pf.iter_batches(batch_size=n_rows)).to_pylist()[:n_rows]
        return TableInfo(list(pf.schema_arrow.names), pf.metadata.num_rows, first)
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"{path} is not a readable parquet file: {exc}") from exc


def _load_json_file(path: Path) -> Any:
    """Read a small JSON metadata file from a saved dataset folder."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc


def _saved_dataset_dir(path: Path) -> Path:
    """The folder holding one split: the folder itself, or its 'train' split."""
    dict_file = path / "dataset_dict.json"
    if dict_file.is_file():
        splits = _load_json_file(dict_file).get("splits", [])
        if "train" not in splits:
            listing = ", ".join(splits) or "none"
            raise DataError(f"{path} holds a DatasetDict without a 'train' split (splits: {listing})")
        return path / "train"
    if (path / "state.json").is_file() or (path / "dataset_info.json").is_file():
        return path
    raise DataError(
        f"{path} is a folder but not a saved dataset (expected state.json and dataset_info.json "
        f"from Dataset.save_to_disk, or dataset_dict.json from DatasetDict.save_to_disk); "
        f"supported: {SUPPORTED_FORMATS}"
    )


def _arrow_rows(
    split_dir: Path, state: dict[str, Any], n_rows: int
) -> tuple[int | None, list[dict[str, Any]], list[str]]:
    """Row count, first rows and schema names from the split's arrow shards."""
    files = [split_dir / f["filename"] for f in state.get("_data_files", []) if "filename" in f]
    if not files:
        return None, [], []
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow ships with datasets
        return None, [], []
    total, first, names = 0, [], []
    try:
        for file in files:
            with pa.memory_map(str(file)) as source:
                reader = pa.ipc.open_stream(source)
                names = names or list(reader.schema.names)
                for batch in reader:
                    total += batch.num_rows
                    if len(first) < n_rows:
                        first.extend(batch.slice(0, n_rows - len(first)).to_pylist())
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{split_dir}: cannot read arrow data: {exc}") from exc
    return total, first, names


def _peek_folder(path: Path, n_rows: int) -> TableInfo:
    split_dir = _saved_dataset_dir(path)
    info_file, state_file = split_dir / "dataset_info.json", split_dir / "state.json"
    info = _load_json_file(info_file) if info_file.is_file() else {}
    state = _load_json_file(state_file) if state_file.is_file() else {}
    columns = list((info.get("features") or {}).keys())
    num_rows, first, names = _arrow_rows(split_dir, state, n_rows)
    if num_rows is None:
        # stale after map/filter, but better than nothing when arrow is unreadable here
        num_rows = ((info.get("splits") or {}).get("train") or {}).get("num_examples")
    return TableInfo(columns or names, num_rows, first)


def peek_columns(path: str | Path, n_rows: int = _DEFAULT_ROWS) -> TableInfo:
    """Columns, row count and the first ``n_rows`` rows of a data file or saved dataset.

    Raises :class:`DataError` for a missing path, an unsupported type, an
    empty file, or unparsable content (with the line for JSON Lines).
    """
    kind = check_data_path(path)
    p = Path(path)
    readers = {
        "jsonl": _peek_jsonl,
        "json": _peek_json,
        "csv": _peek_csv,
        "parquet": _peek_parquet,
        "folder": _peek_folder,
    }
    if kind == "folder":
        return readers[kind](p, n_rows)
    # validation asks three times (columns, reward columns, row count) and training once more: parse once
    stat = p.stat()
    key = (str(p.resolve()), stat.st_mtime_ns, stat.st_size)
    cached = _PEEKED.get(key)
    if cached is None or cached[0] < n_rows:
        cached = (n_rows, readers[kind](p, n_rows))
        if len(_PEEKED) >= 8:
            _PEEKED.pop(next(iter(_PEEKED)))
        _PEEKED[key] = cached
    info = cached[1]
    return TableInfo(list(info.columns), info.num_rows, [dict(r) for r in info.first_rows[:n_rows]])


# (path, mtime, size) -> (rows kept, TableInfo) of the last few files peeked
_PEEKED: dict[tuple[str, int, int], tuple[int, TableInfo]] = {}


def check_columns(path: str | Path, required: Iterable[str], key: str = "data.train") -> list[str]:
    """Problems with a data file as messages prefixed by the config ``key``; [] when fine.

    Collects rather than raises, so config validation can report every
    problem in one go.
    """
    try:
        info = peek_columns(path)
    except DataError as exc:
        return [f"{key}: {exc}"]
    problems = []
    if info.num_rows == 0:
        problems.append(f"{key}: {path} has no rows")
    listing = ", ".join(info.columns) or "none"
    for column in required:
        if column in info.columns:
            continue
        message = f"{key}: column {column!r} not found in {path} (columns: {listing})"
        close = difflib.get_close_matches(column, info.columns, n=1)
        problems.append(message + (f"; did you mean {close[0]!r}?" if close else ""))
    return problems
