"""rlft writes, moves or deletes only what it can show it made: the folder marker, the run folder's
--overwrite/--resume rules, and every command that writes into a folder the user names."""

import json
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from rlft.rundir.markers import MARKER, FolderRefused, check_name, check_output_file, claim_output, mark, read_marker


def _user_folder(path: Path) -> dict:
    """A folder of the user's own files; returns {relative path: bytes} to compare against later."""
    (path / "graphs").mkdir(parents=True)
    files = {"notes.txt": b"mine", "index.html": b"<p>my page</p>", "graphs/plot.png": b"\x89PNG mine",
             "config.yaml": b"project: settings\n"}
    for name, data in files.items():
        (path / name).write_bytes(data)
    return files


def _unchanged(path: Path, files: dict) -> None:
    found = {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    assert found == files


# -- the marker and the claim ------------------------------------------------------------------------
def test_claim_output_writes_into_new_empty_or_own_folders_only(tmp_path):
    new = claim_output(tmp_path / "a" / "b", "report")
    assert read_marker(new)["kind"] == "report"
    assert claim_output(new, "report") == new  # made before: allowed again
    empty = tmp_path / "empty"
    empty.mkdir()
    claim_output(empty, "report")
    assert read_marker(empty)["kind"] == "report"
    mine = tmp_path / "mine"
    files = _user_folder(mine)
    with pytest.raises(FolderRefused, match=r"mine is not empty and was not written by rlft report; .*--force"):
        claim_output(mine, "report")
    with pytest.raises(FolderRefused, match="not written by rlft export"):
        claim_output(new, "export")  # another job's folder is not this one's
    claim_output(mine, "report", force=True)
    _unchanged(mine, files)  # forced: no marker claims the user's folder
    (tmp_path / "file").write_text("x")
    with pytest.raises(FolderRefused, match="is a file"):
        claim_output(tmp_path / "file", "report")


def test_a_marker_that_is_not_rlft_s_counts_for_nothing(tmp_path):
    for text in ("[]", "not json", '{"kind": 3, "id": "x"}', '{"kind": "run"}'):
        (tmp_path / MARKER).write_text(text)
        assert read_marker(tmp_path) is None


def test_output_files_and_names(tmp_path):
    (tmp_path / "out.jsonl").write_text("{}\n")
    with pytest.raises(FolderRefused, match="already exists; .*--force"):
        check_output_file(tmp_path / "out.jsonl")
    check_output_file(tmp_path / "out.jsonl", force=True)
    with pytest.raises(FolderRefused, match="is a folder"):
        check_output_file(tmp_path)
    for bad in ("../up", "/abs", "a/b", "a\\b", "..", ""):
        assert check_name(bad, "name"), bad
    assert check_name("tool_use-2", "name") is None


# -- the run folder -----------------------------------------------------------------------------------
def _cfg(out):
    from rlft.config.compose import compose
    from rlft.config.validate import validate

    composed = compose("grpo", "cpu", [ROOT / "configs/examples/grpo_demo.yaml"], [f"train.output_dir={out}"])
    return validate(composed)[0], composed


def _opts(**kw):
    from rlft.rundir.options import RunOptions

    return RunOptions(**kw)


def test_overwrite_resume_and_reuse_refuse_a_folder_rlft_did_not_make(tmp_path):
    from rlft.errors import RunError
    from rlft.rundir.prepare import check_run_dir, prepare_run_dir

    project = tmp_path / "project"
    files = _user_folder(project)
    cfg, composed = _cfg(project)
    for opts, says in ((_opts(overwrite=True), "refusing to --overwrite"), (_opts(resume=True), "nothing to resume"),
                       (_opts(), "is not an rlft run folder")):
        for check in (check_run_dir, lambda c, o: prepare_run_dir(c, composed, o)):
            with pytest.raises(RunError, match=says) as err:
                check(cfg, opts)
            assert "--overwrite to replace" not in str(err.value)  # never suggests deleting the user's folder
    _unchanged(project, files)
    assert not (tmp_path / "project.old").exists()


def test_overwrite_never_takes_the_working_folder(tmp_path, monkeypatch):
    from rlft.errors import RunError
    from rlft.rundir.prepare import prepare_run_dir

    run = tmp_path / "run"
    run.mkdir()
    mark(run, "run")
    (run / "metrics.jsonl").write_text("")
    monkeypatch.chdir(run)
    cfg, composed = _cfg(".")
    with pytest.raises(RunError, match="current folder or one above it"):
        prepare_run_dir(cfg, composed, _opts(overwrite=True))
    assert sorted(p.name for p in run.iterdir()) == [MARKER, "metrics.jsonl"]  # no lock file left behind


def test_overwrite_moves_an_rlft_run_aside_and_deletes_only_that(tmp_path):
    from rlft.rundir.prepare import prepare_run_dir

    out = tmp_path / "run"
    cfg, composed = _cfg(out)
    first = prepare_run_dir(cfg, composed, _opts())
    first_id = first.marker["id"]
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    first.release()
    second = prepare_run_dir(cfg, composed, _opts(overwrite=True))
    assert second.marker["replaces"] == first_id and second.marker["id"] != first_id
    assert second.replaced == tmp_path / "run.old"
    second.drop_replaced()
    assert not (tmp_path / "run.old").exists() and "replaces" not in second.marker
    second.release()


def test_a_crafted_replaces_marker_deletes_nothing(tmp_path):
    """A run folder copied from someone else names a victim folder, or the id of one: neither is deleted."""
    from rlft.rundir.folder import RunDir

    out, victim, aside = tmp_path / "run", tmp_path / "victim", tmp_path / "run.old"
    out.mkdir()
    files = _user_folder(victim)
    aside_files = _user_folder(aside)
    (out / ".rlft_replaces").write_text(f"{victim}\n")  # the marker older rlft trusted
    mark(out, "run", replaces="0123456789abcdef")
    run = RunDir(out)
    assert run.replaced is None  # <name>.old carries no marker with that id
    run.drop_replaced()
    _unchanged(victim, files)
    _unchanged(aside, aside_files)
    # even a marked run.old is kept unless its id is the one this run replaced
    mark(aside, "run")
    mark(out, "run", replaces="ffffffffffffffff")
    RunDir(out).drop_replaced()
    assert aside.is_dir()


def test_check_writable_writes_nothing(tmp_path):
    from rlft.rundir.prepare import check_writable

    check_writable(tmp_path / "new" / "run")
    assert list(tmp_path.iterdir()) == []


# -- through the CLI (no training) ----------------------------------------------------------------------
def test_tiny_model_refuses_a_folder_of_other_files_and_a_bad_std(tmp_path):
    mine = tmp_path / "mine"
    files = _user_folder(mine)
    res = run_cli("tiny-model", mine)
    assert res.returncode == 2 and "--force" in res.stderr and "Traceback" not in res.stderr
    _unchanged(mine, files)
    for std in ("-1", "0", "nan"):
        res = run_cli("tiny-model", tmp_path / "t", "--init-std", std)
        assert res.returncode == 2 and "--init-std must be > 0" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "t").exists()


def test_tiny_model_rebuilds_its_own_folder(tmp_path):
    out = tmp_path / "tiny"
    assert run_cli("tiny-model", out).returncode == 0
    res = run_cli("tiny-model", out)  # made before: rebuilt in place
    assert res.returncode == 0, res.stderr
    assert (out / "config.json").is_file() and read_marker(out)["kind"] == "tiny-model"


def _fake_run(root: Path) -> Path:
    root.mkdir(parents=True)
    mark(root, "run")
    (root / "config.yaml").write_text("# rlft resolved config\nstage: grpo  # stage profile\n")
    rows = [{"step": s, "time": 1.0 + s, "stage": "grpo", "reward": 0.1 * s, "loss": 1.0 / s} for s in (1, 2, 3)]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "summary.json").write_text(json.dumps({"stage": "grpo", "status": "finished", "steps": 3}))
    return root


def test_report_keeps_a_user_folder_unless_forced_and_then_deletes_nothing(tmp_path):
    run = _fake_run(tmp_path / "run")
    mine = tmp_path / "site"
    files = _user_folder(mine)
    res = run_cli("report", run, "-o", mine)
    assert res.returncode == 2 and "--force" in res.stderr and "Traceback" not in res.stderr
    _unchanged(mine, files)
    res = run_cli("report", run, "-o", mine, "--force")
    assert res.returncode == 0, res.stderr
    assert (mine / "graphs" / "plot.png").read_bytes() == files["graphs/plot.png"]  # the user's graph stays
    assert (mine / "notes.txt").read_bytes() == b"mine"
    # a report folder rlft made is rlft's to rewrite; so is report/ in a run folder
    assert run_cli("report", run, "-o", tmp_path / "new").returncode == 0
    assert run_cli("report", run, "-o", tmp_path / "new").returncode == 0
    assert run_cli("report", run).returncode == 0 and run_cli("report", run).returncode == 0


def test_pipeline_names_stay_inside_the_output_root(tmp_path):
    for name_line, key in (("name: ../escape", "name"), ("name: /tmp/abs", "name"),
                           ("name: ok\nstages:\n  - stage: grpo\n    name: ../x", "stages[1].name")):
        text = name_line + ("" if "stages:" in name_line else "\nstages:\n  - stage: grpo")
        path = tmp_path / "p.yaml"
        path.write_text(text + "\n    data: {train: demo}\n    rewards: [{fn: char_fraction}]\n    model: "
                               "{name_or_path: tiny}\n")
        res = run_cli("pipeline", "validate", path)
        assert res.returncode == 2, res.stdout + res.stderr
        assert key in res.stderr and "path separators" in res.stderr and "Traceback" not in res.stderr


def test_generate_and_export_and_eval_check_their_inputs_and_outputs_first(tmp_path):
    binary = tmp_path / "prompts.bin"
    binary.write_bytes(b"\x00\xff\xfe\x00garbage")
    target = tmp_path / "nowhere"  # no model at all: the output checks come first
    res = run_cli("generate", target, "--file", binary)
    assert res.returncode == 2 and "not UTF-8 text" in res.stderr and "Traceback" not in res.stderr
    nul = tmp_path / "nul.txt"
    nul.write_text("a\0b\n")
    res = run_cli("generate", target, "--file", nul)
    assert res.returncode == 2 and "NUL bytes" in res.stderr


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory):
    """A PEFT adapter folder on the tiny model, made without training (export and eval take it)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlft.tiny import ensure_tiny_model

    base = ensure_tiny_model()
    out = tmp_path_factory.mktemp("adapter")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=2, target_modules=["q_proj"]))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def test_export_and_eval_outputs_are_checked_before_any_work(tmp_path, tiny_adapter):
    existing = tmp_path / "adapter.bin"
    existing.write_bytes(b"mine")
    res = run_cli("export", tiny_adapter, "-o", existing)
    assert res.returncode == 2 and "is a file" in res.stderr and existing.read_bytes() == b"mine"
    folder = tmp_path / "evals"
    folder.mkdir()
    cfg = tmp_path / "eval.yaml"
    cfg.write_text("model: {name_or_path: tiny}\nrewards: [{fn: char_fraction}]\n")
    res = run_cli("eval", tiny_adapter, "-c", cfg, "--data", "demo", "-o", folder)
    assert res.returncode == 2 and "is a folder" in res.stderr and "Traceback" not in res.stderr
    assert "rows written" not in res.stdout  # refused before sampling
    kept = tmp_path / "eval.jsonl"
    kept.write_text("mine\n")
    res = run_cli("eval", tiny_adapter, "-c", cfg, "--data", "demo", "-o", kept, "--max-prompts", "1", "-n", "1")
    assert res.returncode == 2 and "--force" in res.stderr and kept.read_text() == "mine\n"
    res = run_cli("eval", tiny_adapter, "-c", cfg, "--data", "demo", "-o", kept, "--max-prompts", "1", "-n", "1",
                  "--force")
    assert res.returncode == 0, res.stderr[-2000:]
    assert kept.read_text() != "mine\n"


# -- a marker alone is never enough (issue 35) ------------------------------------------------------------
def _snapshot(path: Path) -> dict:
    """Every file under `path` (links as their target's name), to compare byte for byte later."""
    out = {}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        if p.is_symlink():
            out[rel] = ("link", str(p.readlink()))
        elif p.is_file():
            out[rel] = p.read_bytes()
        else:
            out[rel] = "dir"
    return out


def _copied_marker(path: Path, kind: str) -> dict:
    """A folder of one user file beside a marker copied from a folder rlft made of `kind`."""
    path.mkdir(parents=True)
    (path / "notes.txt").write_bytes(b"mine, not rlft's\n")
    mark(path, kind)
    return _snapshot(path)


def _demo_args(out, *extra):
    return ["train", "--stage", "grpo", "--hw", "cpu", "-c", ROOT / "configs/examples/grpo_demo.yaml",
            f"train.output_dir={out}", *extra]


@pytest.mark.parametrize("command", ["report", "tiny-model", "train --resume", "export"])
def test_a_copied_marker_does_not_make_a_user_folder_rlft_s(tmp_path, command, request):
    site = tmp_path / "site"
    kind = {"report": "report", "tiny-model": "tiny-model", "train --resume": "run", "export": "export"}[command]
    before = _copied_marker(site, kind)
    if command == "report":
        res = run_cli("report", _fake_run(tmp_path / "run"), "-o", site)
        assert "holds notes.txt, which rlft report does not write" in res.stderr
    elif command == "tiny-model":
        res = run_cli("tiny-model", site)
        assert "holds notes.txt, which rlft tiny-model does not write" in res.stderr
    elif command == "train --resume":
        res = run_cli(*_demo_args(site, "--resume"))
        assert "nothing to resume" in res.stderr and "--overwrite" not in res.stderr
    else:
        res = run_cli("export", request.getfixturevalue("tiny_adapter"), "-o", site)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert len(res.stderr.strip().splitlines()[-1]) > 0
    assert _snapshot(site) == before  # byte for byte: nothing written, replaced or deleted


def test_overwrite_of_a_folder_with_a_copied_marker_moves_it_aside_whole_and_deletes_nothing(tmp_path, capsys):
    from rlft.rundir.prepare import prepare_run_dir

    site = tmp_path / "site"
    before = _copied_marker(site, "run")
    cfg, composed = _cfg(site)
    run = prepare_run_dir(cfg, composed, _opts(overwrite=True))
    (kept,) = tmp_path.glob("site.replaced-*")
    assert "holds notes.txt, which rlft did not write: moved the whole folder to" in capsys.readouterr().err
    assert run.replaced is None and "replaces" not in run.marker  # never scheduled for deletion
    run.drop_replaced()
    run.release()
    assert _snapshot(kept) == before and not (tmp_path / "site.old").exists()


def test_overwrite_of_a_real_run_holding_a_user_file_deletes_nothing(tmp_path):
    from rlft.rundir.prepare import prepare_run_dir

    out = tmp_path / "run"
    cfg, composed = _cfg(out)
    first = prepare_run_dir(cfg, composed, _opts())
    first.release()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    (out / "notes.txt").write_text("my notes on this run\n")
    before = _snapshot(out)
    second = prepare_run_dir(cfg, composed, _opts(overwrite=True))
    second.drop_replaced()  # as at the new run's first checkpoint
    second.release()
    (kept,) = tmp_path.glob("run.replaced-*")
    assert _snapshot(kept) == before
    # a replaced run that only later got a user's file is kept too, with a note
    third = prepare_run_dir(cfg, composed, _opts(overwrite=True))
    assert third.replaced == tmp_path / "run.old"
    (tmp_path / "run.old" / "later.txt").write_text("mine")
    third.drop_replaced()
    third.release()
    assert (tmp_path / "run.old" / "later.txt").read_text() == "mine"


def test_a_refused_resume_writes_nothing(tmp_path):
    """A run of an older rlft (no marker) with no checkpoint: --resume is refused before the folder is touched
    (no marker added, no checkpoints/ made, no lock file left)."""
    from rlft.rundir.prepare import prepare_run_dir

    out = tmp_path / "run"
    cfg, composed = _cfg(out)
    prepare_run_dir(cfg, composed, _opts()).release()
    (out / MARKER).unlink()
    (out / "checkpoints").rmdir()
    before = _snapshot(out)
    res = run_cli(*_demo_args(out, "--resume"))
    assert res.returncode == 2 and "no complete checkpoint to resume" in res.stderr, res.stderr[-2000:]
    assert _snapshot(out) == before


def test_resume_refuses_links_and_a_config_rlft_did_not_write(tmp_path):
    from rlft.errors import RunError
    from rlft.rundir.prepare import check_run_dir, prepare_run_dir

    out = tmp_path / "run"
    cfg, composed = _cfg(out)
    prepare_run_dir(cfg, composed, _opts()).release()
    victim = tmp_path / "victim.jsonl"
    victim.write_text("mine\n")
    (out / "metrics.jsonl").symlink_to(victim)
    with pytest.raises(RunError, match="metrics.jsonl is a symbolic link"):
        check_run_dir(cfg, _opts(resume=True))
    (out / "metrics.jsonl").unlink()
    (out / "checkpoints" / "checkpoint-1").symlink_to(tmp_path)
    with pytest.raises(RunError, match="checkpoint-1 is a symbolic link"):
        check_run_dir(cfg, _opts(resume=True))
    (out / "checkpoints" / "checkpoint-1").unlink()
    (out / "config.yaml").write_text("project: settings\n")
    with pytest.raises(RunError, match="is not a config.yaml rlft wrote"):
        prepare_run_dir(cfg, composed, _opts(resume=True))
    assert victim.read_text() == "mine\n" and not (out / ".rlft.lock").exists()


def test_a_symlinked_run_folder_is_refused_before_anything_moves(tmp_path):
    """train.output_dir a link to a finished run: --overwrite used to move the link aside and die at the first
    checkpoint deleting through it; a link is refused up front, whatever the flags, and nothing changes."""
    from rlft.errors import RunError
    from rlft.rundir.prepare import check_run_dir, prepare_run_dir

    real = tmp_path / "real"
    cfg, composed = _cfg(real)
    prepare_run_dir(cfg, composed, _opts()).release()
    before = _snapshot(tmp_path)
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)
    cfg, composed = _cfg(link)
    for opts in (_opts(overwrite=True), _opts(resume=True), _opts()):
        with pytest.raises(RunError, match="is a symbolic link"):
            check_run_dir(cfg, opts)
        with pytest.raises(RunError, match="is a symbolic link"):
            prepare_run_dir(cfg, composed, opts)
    assert link.is_symlink() and not (tmp_path / "latest.old").exists()
    assert {k: v for k, v in _snapshot(tmp_path).items() if not k.startswith("latest")} == before


def test_report_refuses_a_symlinked_output_folder(tmp_path):
    run = _fake_run(tmp_path / "run")
    real = tmp_path / "real"
    assert run_cli("report", run, "-o", real).returncode == 0  # a report rlft wrote: its to replace, not via a link
    before = _snapshot(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    res = run_cli("report", run, "-o", link)
    assert res.returncode == 2 and "is a symbolic link" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("report", run, "-o", link, "--force")
    assert res.returncode == 2 and "is a symbolic link" in res.stderr
    assert _snapshot(real) == before
    (run / "report").symlink_to(real)  # planted in the run folder, the default place
    res = run_cli("report", run)
    assert res.returncode == 2 and "is a symbolic link" in res.stderr
    assert _snapshot(real) == before


def test_report_replaces_only_the_graphs_it_drew(tmp_path):
    run = _fake_run(tmp_path / "run")
    out = tmp_path / "rep"
    assert run_cli("report", run, "-o", out).returncode == 0
    drawn = read_marker(out).get("graphs")
    assert isinstance(drawn, list)
    (out / "graphs" / "mine.png").write_bytes(b"\x89PNG mine")
    before = _snapshot(out)
    res = run_cli("report", run, "-o", out)
    assert res.returncode == 2 and "graphs/mine.png" in res.stderr
    assert _snapshot(out) == before
    (out / "graphs" / "mine.png").unlink()
    assert run_cli("report", run, "-o", out).returncode == 0
