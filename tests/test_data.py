"""Tests for rlft.data: peeking, loading and dataset preparation."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rlft.data import DataError, TableInfo, check_columns, peek_columns

datasets = pytest.importorskip("datasets")

from rlft.data.load import load_table, prepare_preference_dataset, prepare_prompt_dataset  # noqa: E402

ROWS = [
    {"prompt": "What is 2+2?", "answer": "4", "target": "a"},
    {"prompt": "What is 3+3?", "answer": "6", "target": "b"},
    {"prompt": "What is 1+1?", "answer": "2", "target": "c"},
]


# --- writers for each format -----------------------------------------------


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_json(path: Path, rows: list[dict], wrap: bool = False) -> Path:
    path.write_text(json.dumps({"data": rows} if wrap else rows))
    return path


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_saved(path: Path, rows: list[dict]) -> Path:
    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def write_saved_dict(path: Path, rows: list[dict]) -> Path:
    ds = datasets.Dataset.from_list(rows)
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(path))
    return path


WRITERS = {
    "data.jsonl": write_jsonl,
    "data.json": write_json,
    "wrapped.json": lambda p, rows: write_json(p, rows, wrap=True),
    "data.csv": write_csv,
    "data.parquet": write_parquet,
    "saved": write_saved,
    "saved_dict": write_saved_dict,
}


@pytest.fixture(params=sorted(WRITERS))
def data_file(request, tmp_path) -> Path:
    return WRITERS[request.param](tmp_path / request.param, ROWS)


# --- peek ------------------------------------------------------------------


def test_peek_each_format(data_file):
    info = peek_columns(data_file, n_rows=2)
    assert isinstance(info, TableInfo)
    assert info.columns == ["prompt", "answer", "target"]
    assert info.num_rows == 3
    assert info.first_rows == ROWS[:2]


def test_load_each_format_round_trip(data_file):
    ds = load_table(data_file)
    assert isinstance(ds, datasets.Dataset)
    assert ds.column_names == ["prompt", "answer", "target"]
    rows = [dict(r) for r in ds]
    if data_file.suffix == ".csv":
        # CSV carries no types; the loader infers numbers, as pandas does
        rows = [{k: str(v) for k, v in r.items()} for r in rows]
    assert rows == ROWS


def test_jsonl_columns_are_union_of_rows(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"a": 1}, {"a": 2, "b": 3}])
    path.write_text(path.read_text() + "\n\n")
    info = peek_columns(path)
    assert info.columns == ["a", "b"] and info.num_rows == 2


def test_json_lines_saved_as_json(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    assert peek_columns(path).num_rows == 2
    assert load_table(path)["prompt"][:] == ["a", "b"]


def test_missing_file_names_path(tmp_path):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(DataError, match="not found.*nope.jsonl"):
        peek_columns(path)
    with pytest.raises(DataError, match="nope.jsonl"):
        load_table(path)


def test_unknown_extension_lists_supported(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("hello")
    with pytest.raises(DataError, match=r"'\.txt'.*\.jsonl, \.json, \.csv, \.parquet"):
        peek_columns(path)


@pytest.mark.parametrize("name,content", [("e.jsonl", ""), ("e.json", "  \n"), ("e.csv", ""), ("blank.jsonl", "\n\n")])
def test_empty_file_says_empty(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError, match="empty"):
        peek_columns(path)
    with pytest.raises(DataError, match="empty"):
        load_table(path)


def test_header_only_csv_has_no_rows(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("prompt,answer\n")
    assert peek_columns(path) == TableInfo(["prompt", "answer"], 0, [])
    assert check_columns(path, ["prompt"]) == [f"data.train: {path} has no rows"]
    with pytest.raises(DataError, match="no rows"):
        load_table(path)


def test_bad_jsonl_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": "b",}\n{"prompt": "c"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl: line 3 is not valid JSON"):
        peek_columns(path)
    with pytest.raises(DataError, match="line 3"):
        load_table(path)


def test_jsonl_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "arr.jsonl"
    path.write_text('{"prompt": "a"}\n[1, 2]\n')
    with pytest.raises(DataError, match="line 2 is not a JSON object"):
        peek_columns(path)


def test_bad_json_and_wrong_shape(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('[{"prompt": "a"},')
    with pytest.raises(DataError, match="not valid JSON"):
        peek_columns(broken)
    scalar = tmp_path / "scalar.json"
    scalar.write_text("42")
    with pytest.raises(DataError, match="list of objects"):
        peek_columns(scalar)


def test_folder_that_is_not_a_dataset(tmp_path):
    with pytest.raises(DataError, match="not a saved dataset"):
        peek_columns(tmp_path)


def test_dataset_dict_without_train(tmp_path):
    ds = datasets.Dataset.from_list(ROWS)
    datasets.DatasetDict({"test": ds}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DataError, match="without a 'train' split.*test"):
        peek_columns(tmp_path / "dd")
    with pytest.raises(DataError, match="without a 'train' split"):
        load_table(tmp_path / "dd")


def test_check_columns_lists_available(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    assert check_columns(path, ["prompt", "answer"]) == []
    problems = check_columns(path, ["question", "answr"], key="data.eval")
    assert problems[0] == f"data.eval: column 'question' not found in {path} (columns: prompt, answer, target)"
    assert problems[1].startswith(f"data.eval: column 'answr' not found in {path} (columns: prompt, answer, target)")
    assert "did you mean 'answer'" in problems[1]


def test_check_columns_reports_file_errors(tmp_path):
    missing = tmp_path / "x.jsonl"
    assert check_columns(missing, ["prompt"]) == [f"data.train: data file not found: {missing}"]


# --- prompt datasets -------------------------------------------------------


def test_prepare_prompt_renames_and_keeps_columns():
    ds = datasets.Dataset.from_list([{"question": "q1", "answer": "1"}, {"question": "q2", "answer": "2"}])
    out = prepare_prompt_dataset(ds, "question")
    assert out.column_names == ["prompt", "answer"]
    assert out["prompt"][:] == ["q1", "q2"] and out["answer"][:] == ["1", "2"]


def test_prepare_prompt_system_prompt_on_text():
    ds = datasets.Dataset.from_list(ROWS)
    out = prepare_prompt_dataset(ds, system_prompt="Be brief.")
    assert out[0]["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert out.column_names == ["prompt", "answer", "target"]


def test_prepare_prompt_chat_prompts():
    chat = [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "own"}, {"role": "user", "content": "yo"}],
    ]
    ds = datasets.Dataset.from_dict({"messages": chat, "answer": ["a", "b"]})
    out = prepare_prompt_dataset(ds, "messages")
    assert out[0]["prompt"] == chat[0]
    with_system = prepare_prompt_dataset(ds, "messages", system_prompt="sys")
    assert with_system[0]["prompt"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    # a row that brings its own system message keeps it
    assert with_system[1]["prompt"] == chat[1]


def test_prepare_prompt_missing_column_lists_available():
    ds = datasets.Dataset.from_list(ROWS)
    expected = r"data\.train \(train\.jsonl\): prompt column 'question' not found.*columns: prompt, answer, target"
    with pytest.raises(DataError, match=expected):
        prepare_prompt_dataset(ds, "question", source="data.train (train.jsonl)")


def test_prepare_prompt_empty_dataset_and_empty_row():
    empty = datasets.Dataset.from_dict({"prompt": []})
    with pytest.raises(DataError, match="empty"):
        prepare_prompt_dataset(empty)
    ds = datasets.Dataset.from_dict({"prompt": ["ok", "   ", "fine"]})
    with pytest.raises(DataError, match="row 1: prompt in column 'prompt' is empty"):
        prepare_prompt_dataset(ds)
    ds = datasets.Dataset.from_dict({"prompt": ["ok", None]})
    with pytest.raises(DataError, match="row 1"):
        prepare_prompt_dataset(ds)


def test_prepare_prompt_wrong_type_names_row():
    ds = datasets.Dataset.from_dict({"prompt": [1, 2]})
    with pytest.raises(DataError, match="row 0: column 'prompt': expected text or a list of chat messages, got int"):
        prepare_prompt_dataset(ds)


def test_prepare_prompt_refuses_to_overwrite_existing_prompt_column():
    ds = datasets.Dataset.from_dict({"question": ["q"], "prompt": ["other"]})
    with pytest.raises(DataError, match="already has a 'prompt' column"):
        prepare_prompt_dataset(ds, "question")


# --- preference datasets ---------------------------------------------------

PAIRS = [
    {"q": "p0", "good": "yes", "bad": "no"},
    {"q": "p1", "good": "same", "bad": " same "},
    {"q": "p2", "good": "", "bad": "no"},
    {"q": "p3", "good": "fine", "bad": "bad"},
    {"q": "p4", "good": "ok", "bad": None},
    {"q": "p5", "good": "dup", "bad": "dup"},
]


def _pairs():
    return datasets.Dataset.from_list(PAIRS)


def test_preference_drops_and_reports_bad_rows():
    out, report = prepare_preference_dataset(_pairs(), "q", "good", "bad")
    assert out.column_names == ["prompt", "chosen", "rejected"]
    assert out["prompt"][:] == ["p0", "p3"]
    assert report == {
        "total": 6,
        "kept": 2,
        "skipped": 4,
        "first_rows": [1, 2, 4, 5],
        "reasons": {"identical chosen and rejected": 2, "empty chosen": 1, "empty rejected": 1},
    }


def test_preference_clean_data_reports_nothing():
    ds = datasets.Dataset.from_list([{"prompt": "p", "chosen": "a", "rejected": "b"}])
    out, report = prepare_preference_dataset(ds)
    assert len(out) == 1 and report["skipped"] == 0 and report["first_rows"] == [] and report["reasons"] == {}


def test_preference_first_rows_capped_at_five():
    rows = [{"prompt": "p", "chosen": "x", "rejected": "x"}] * 7 + [{"prompt": "p", "chosen": "a", "rejected": "b"}]
    ds = datasets.Dataset.from_list(rows)
    _, report = prepare_preference_dataset(ds)
    assert report["skipped"] == 7 and report["first_rows"] == [0, 1, 2, 3, 4]


def test_preference_strict_raises_with_count_and_rows():
    with pytest.raises(DataError, match=r"data\.train: 4 of 6 rows .*first rows: 1, 2, 4, 5"):
        prepare_preference_dataset(_pairs(), "q", "good", "bad", strict=True)


def test_preference_all_rows_bad_is_an_error():
    ds = datasets.Dataset.from_list([{"prompt": "p", "chosen": "x", "rejected": "x"}])
    with pytest.raises(DataError, match="no usable rows"):
        prepare_preference_dataset(ds)


def test_preference_missing_columns_listed():
    expected = r"chosen column 'chosen' not found.*rejected column 'rejected' not found.*columns: q, good, bad"
    with pytest.raises(DataError, match=expected):
        prepare_preference_dataset(_pairs(), "q")


def test_preference_type_mismatch_names_column_and_row():
    ds = datasets.Dataset.from_dict({"prompt": ["a", "b"], "chosen": ["x", "y"], "rejected": [1, 2]})
    with pytest.raises(DataError, match="row 0: column 'rejected': expected text or a list of chat messages, got int"):
        prepare_preference_dataset(ds)


def test_preference_format_mismatch_between_columns():
    msgs = [{"role": "assistant", "content": "x"}]
    ds = datasets.Dataset.from_dict({"prompt": ["a"], "chosen": [msgs], "rejected": ["y"]})
    with pytest.raises(DataError, match="row 0: prompt, chosen and rejected must share one format"):
        prepare_preference_dataset(ds)


def test_preference_chat_pairs():
    def turn(role, text):
        return [{"role": role, "content": text}]

    ds = datasets.Dataset.from_dict(
        {
            "prompt": [turn("user", "hi"), turn("user", "hey")],
            "chosen": [turn("assistant", "hello"), turn("assistant", "same")],
            "rejected": [turn("assistant", "go away"), turn("assistant", "same ")],
        }
    )
    out, report = prepare_preference_dataset(ds)
    assert len(out) == 1 and report["reasons"] == {"identical chosen and rejected": 1}
    assert out[0]["chosen"] == turn("assistant", "hello")
