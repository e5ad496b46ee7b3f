"""rlft's coercion of string and path options (rlft/cli_coerce.py) gives exactly what typer's own gives:
the same values, the same errors, the same exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import pytest
import typer
import typer.core
from typer.testing import CliRunner

import rlft.cli  # noqa: F401  (installs rlft's coercion, as every `rlft` command does)
from rlft.cli_coerce import install

pytest.importorskip("typer._coercion", reason="this typer has no pydantic coercion step to replace")
from typer._coercion import build_runtime_param as typer_runtime_param  # noqa: E402


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.command()
    def main(p: Path = typer.Argument(...), s: str = typer.Option("cpu", "--s"),
             files: Optional[List[Path]] = typer.Option(None, "-c"),
             must: Optional[Path] = typer.Option(None, "--must", exists=True, dir_okay=False),
             real: Optional[Path] = typer.Option(None, "--real", resolve_path=True),
             n: int = typer.Option(4, "-n", min=1), flag: bool = typer.Option(False, "--flag"),
             rest: Optional[List[str]] = typer.Argument(None)) -> None:
        typer.echo(repr((p, s, files, must, real, n, flag, rest)))

    return app


CASES = [
    ["x"],
    ["./a/../b", "--s", "", "k=v", "a b"],
    ["x", "-c", "a", "-c", "./b/", "-c", ""],
    ["x", "--must", "/nonexistent/file"],
    ["x", "--must", "."],
    ["x", "--must", __file__],
    ["x", "--real", "."],
    ["x", "-n", "0"],
    ["x", "-n", "abc"],
    ["x", "--flag"],
    [],
    ["x", "-c"],
    ["", "--s", "é"],
]


def _run(args: list[str], runtime_param) -> tuple[int, str]:
    saved = typer.core.build_runtime_param
    typer.core.build_runtime_param = runtime_param
    try:
        res = CliRunner().invoke(_app(), args)
    finally:
        typer.core.build_runtime_param = saved
    return res.exit_code, res.output


def test_installed_by_the_cli():
    assert typer.core.build_runtime_param is not typer_runtime_param
    assert install() is True


@pytest.mark.parametrize("args", CASES)
def test_same_values_errors_and_exit_codes_as_typer(args):
    ours = _run(args, typer.core.build_runtime_param)
    theirs = _run(args, typer_runtime_param)
    assert ours == theirs
