"""The CLI maps errors to messages and exit codes in one place (`rlft.commands.common.exits`), and re-launching
under `accelerate launch` lives in rlft/launch/processes.py."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import typer

import rlft.cli as cli
import rlft.commands.common as common
from rlft.config.errors import ConfigError, Problem

# the app and its verbs; reward_try.py is the work `rewards try` does, and words its own errors
CLI_SOURCES = [Path(cli.__file__), *sorted(p for p in Path(common.__file__).parent.glob("*.py")
                                           if p.name != "reward_try.py")]


@pytest.mark.parametrize("module, name, code", common.USER_ERRORS)
def test_each_rlft_error_is_one_line_and_its_exit_code(module, name, code, capsys):
    cls = getattr(importlib.import_module(module), name)
    exc = cls("the message")
    if code is None:  # a RunError carries its own code
        exc.exit_code = code = 7
    with pytest.raises(typer.Exit) as got, common.exits():
        raise exc
    assert got.value.exit_code == code
    assert capsys.readouterr().err == "error: the message\n"


def test_config_problems_with_the_command_s_note_and_other_errors_untouched(capsys):
    problems = [Problem("train.max_steps", "command line", "must be > 0"), Problem("a.b", "x.yaml:3", "w", "warning")]
    with pytest.raises(typer.Exit) as got, common.exits("config invalid: {errors}"):
        raise ConfigError(problems)
    assert got.value.exit_code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "config invalid: 1 error"
    with pytest.raises(KeyError), common.exits():
        raise KeyError("a bug")  # not rlft's to explain: the traceback says where
    with pytest.raises(PermissionError), common.exits():
        raise PermissionError(13, "Permission denied", "/x")  # a read-only folder only where the command writes


def test_a_read_only_folder_where_a_command_writes(capsys):
    with pytest.raises(typer.Exit) as got, common.exits(read_only=True):
        raise PermissionError(13, "Permission denied", "/runs/x")
    assert got.value.exit_code == 2
    assert capsys.readouterr().err.startswith("error: cannot write /runs/x: Permission denied;")


def test_no_command_catches_rlft_errors_itself():
    """Every `except` naming one of the mapped errors is in `exits`: commands wrap their work in it instead."""
    mapped = {name for _, name, _ in common.USER_ERRORS} | {"ConfigError"}
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in CLI_SOURCES]
    where = []
    for fn in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(fn, ast.FunctionDef) and fn.name != "exits":
            for node in ast.walk(fn):
                if isinstance(node, ast.ExceptHandler) and node.type is not None:
                    names = {n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)}
                    where += [f"{fn.name}: except {n}" for n in names & mapped]
    assert not where, where


def test_relaunch_makes_the_run_folder_once_and_pins_it(tmp_path, monkeypatch, capsys):
    from rlft.config import load_config
    from rlft.launch.processes import relaunch, replace_hw
    from rlft.rundir.options import RunOptions
    from rlft.rundir.folder import is_run_folder

    assert replace_hw(["train", "--hw", "auto", "--hw=auto", "-c", "x.yaml"], "ddp") == \
        ["train", "--hw", "ddp", "--hw=ddp", "-c", "x.yaml"]
    root = tmp_path / "run"
    cfg, composed, _ = load_config("grpo", "ddp", [], ["data.train=demo", "rewards=[json_valid]",
                                                       f"train.output_dir={root}"])
    seen = {}

    def launch(cfg, argv):
        seen["argv"], seen["locked"] = argv, (root / ".rlft.lock").is_file()
        return 130

    monkeypatch.setattr("rlft.launch.processes.launch", launch)
    argv = ["train", "--stage", "grpo", "--hw", "auto", "--overwrite"]
    assert relaunch(cfg, composed, RunOptions(argv=argv), "ddp", argv) == 130
    assert seen == {"argv": ["train", "--stage", "grpo", "--hw", "ddp", f"train.output_dir={root}"], "locked": True}
    assert is_run_folder(root) and not (root / ".rlft.lock").exists()  # made once here; released after
