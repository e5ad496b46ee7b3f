"""Relative paths inside a config file resolve against that file, with a working-directory fallback."""
import os

from rlft.config.compose import anchor_paths


def test_paths_resolve_next_to_the_config_file(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    (conf / "data").mkdir(parents=True)
    (conf / "data" / "train.jsonl").write_text("{}\n")
    (conf / "r.py").write_text("def f(**k): return [0.0]\n")
    monkeypatch.chdir(tmp_path)
    data = {"data": {"train": "data/train.jsonl"}, "rewards": [{"fn": "r.py:f"}, {"fn": "char_fraction"}],
            "model": {"name_or_path": "org/model", "ref": "tiny"}}
    anchor_paths(data, conf)
    assert data["data"]["train"] == os.path.join("conf", "data", "train.jsonl")
    assert data["rewards"][0]["fn"] == os.path.join("conf", "r.py") + ":f"
    assert data["rewards"][1]["fn"] == "char_fraction"       # registry names are not paths
    assert data["model"] == {"name_or_path": "org/model", "ref": "tiny"}  # hub ids stay hub ids


def test_a_path_that_exists_only_from_the_working_directory_keeps_its_meaning(tmp_path, monkeypatch):
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "r.py").write_text("def f(**k): return [0.0]\n")
    monkeypatch.chdir(tmp_path)
    data = {"rewards": [{"fn": "fixtures/r.py:f"}], "data": {"train": "missing.jsonl"}}
    anchor_paths(data, tmp_path / "elsewhere")
    assert data["rewards"][0]["fn"] == "fixtures/r.py:f"
    assert data["data"]["train"] == os.path.join("elsewhere", "missing.jsonl")  # neither exists: the file's meaning
