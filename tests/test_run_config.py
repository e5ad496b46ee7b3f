"""rlft.config.run_config.read_run_config: the one reader of a run's config.yaml, and how each caller words its
problems."""

from __future__ import annotations

import pytest

from rlft.config.run_config import RunConfigError, read_run_config

CASES = {  # file bytes -> (what the error says, RunConfigError.found)
    b"\x00\xff\xfe\x80 binary": ("cannot read", None),
    b"stage: [grpo\n  model: {": ("cannot read", None),
    b"- grpo\n": ("is damaged: it is not a mapping", "a list"),
    b"7\n": ("is damaged: it is not a mapping", "a number"),
}


@pytest.mark.parametrize("data", list(CASES))
def test_damage_is_one_error_naming_the_file(tmp_path, data):
    (tmp_path / "config.yaml").write_bytes(data)
    with pytest.raises(RunConfigError) as got:
        read_run_config(tmp_path)
    said, found = CASES[data]
    assert said in str(got.value) and str(tmp_path / "config.yaml") in str(got.value)
    assert got.value.path == tmp_path / "config.yaml" and got.value.found == found and not got.value.missing


def test_missing_and_empty(tmp_path):
    with pytest.raises(RunConfigError) as got:
        read_run_config(tmp_path)
    assert got.value.missing and "cannot read" in str(got.value)
    (tmp_path / "config.yaml").write_text("# only a comment\n")
    assert read_run_config(tmp_path) == {}
    with pytest.raises(RunConfigError, match="it is not a mapping") as got:
        read_run_config(tmp_path, empty_ok=False)
    assert got.value.found == "null"
    (tmp_path / "config.yaml").write_text("stage: grpo  # set by the profile\nmodel: {name_or_path: tiny}\n")
    assert read_run_config(tmp_path) == {"stage": "grpo", "model": {"name_or_path": "tiny"}}


def test_a_run_whose_config_is_not_utf8_is_no_run_to_resume(tmp_path, monkeypatch):
    """A bare --resume looks through runs/<stage>-<timestamp>: a binary config.yaml there is not a match (it
    used to end the command with a UnicodeDecodeError)."""
    from rlft.config import load_config
    from rlft.errors import RunError
    from rlft.rundir.prepare import find_run_to_resume
    from rlft.rundir.resume_keys import saved_config

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "grpo-20240101-000000"
    run.mkdir(parents=True)
    (run / "config.yaml").write_bytes(b"\x00\xff\xfe\x80 binary")
    assert saved_config(run) is None
    cfg, _, _ = load_config("grpo", "cpu")
    with pytest.raises(RunError, match="no run in runs/ has this config"):
        find_run_to_resume(cfg, [])
