"""What every command shares: the common options, the config loaded and checked (`load`), problems printed, and
the one mapping from errors to messages and exit codes (`exits`). Light: typer and the stage and hardware names."""

from __future__ import annotations

import errno
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from rlft.config.errors import ConfigError, Problem
from rlft.config.stages import DEFAULT_STAGE, HARDWARE, STAGES  # the help text needs only these names, not the schema

STAGE_OPT = typer.Option(DEFAULT_STAGE, "--stage", "-s", help=f"Stage profile: {', '.join(STAGES)}.")
HW_OPT = typer.Option("cpu", "--hw", help=f"Hardware profile: {', '.join(HARDWARE)}, or auto (picked from the GPUs "
                                          "visible here).")
FILES_OPT = typer.Option(None, "--config", "-c", help="Your YAML file(s), applied in order after the profiles.")
OVERRIDES_ARG = typer.Argument(None, help="KEY=VALUE overrides, applied last (e.g. train.learning_rate=1e-5).")


def _set_quiet(value: bool) -> bool:
    if value:  # the environment, so a relaunched `accelerate launch` process is quiet too
        import os

        os.environ["RLFT_QUIET"] = "1"
    return value


QUIET_OPT = typer.Option(False, "--quiet", "-q", callback=_set_quiet,
                         help="No progress display (the same as RLFT_QUIET=1); results, warnings and errors still "
                              "print.")
SMOKE_HELP = ("Smoke-test this config on the CPU (for CI): the same stage, data, rewards and settings on a tiny model "
              "of the same family, one CPU process, a few steps with a checkpoint, --resume, report and the final "
              "model loaded; runs go to runs/smoke/, and summary.json's smoke block lists what was replaced.")


def err(text: str) -> None:
    typer.echo(text, err=True)


MAX_SHOWN_PROBLEMS = 50  # a pasted 10 MB file should not print 276,000 lines


def print_problems(problems: list[Problem]) -> None:
    """Errors first, then warnings; at most MAX_SHOWN_PROBLEMS lines, with a count of the rest."""
    ordered = [p for p in problems if p.level == "error"] + [p for p in problems if p.level != "error"]
    for p in ordered[:MAX_SHOWN_PROBLEMS]:
        err(str(p))
    rest = ordered[MAX_SHOWN_PROBLEMS:]
    if rest:
        n_err = sum(p.level == "error" for p in rest)
        err(f"... and {len(rest)} more problem{'s' if len(rest) != 1 else ''} not shown "
             f"({n_err} error{'s' if n_err != 1 else ''}, {len(rest) - n_err} "
             f"warning{'s' if len(rest) - n_err != 1 else ''})")


# rlft's own errors that end a command with "error: <message>" and this exit code (None: the error's own
# `exit_code`), as (module, class): looked up among the modules already imported, so checking imports nothing
USER_ERRORS = (("rlft.errors", "RunError", None), ("rlft.models.weights", "ModelLoadError", 2),
               ("rlft.rundir.markers", "FolderRefused", 2),
               ("rlft.monitor.report.load", "ReportInputError", 2), ("rlft.commands.reward_try", "TryError", 2))


def _exit_code(exc: BaseException) -> int | None:
    for module, name, code in USER_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(exc, cls):
            return exc.exit_code if code is None else code
    return None


@contextmanager
def exits(config_note: Optional[str] = None, *, read_only: bool = False):
    """The one mapping from errors to what the user sees and the exit code, around a command's work: a
    ConfigError prints its problems (then `config_note`, `{errors}` filled with their count), exit 2; rlft's
    own errors (USER_ERRORS) one line; `read_only`: a folder that cannot be written, one line, exit 2."""
    try:
        yield
    except ConfigError as exc:
        print_problems(exc.problems)
        if config_note:
            n = sum(p.level == "error" for p in exc.problems)
            err(config_note.format(errors=f"{n} error{'s' if n != 1 else ''}"))
        raise typer.Exit(2)
    except OSError as exc:
        if not read_only:
            raise
        _read_only_exit(exc)
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        err(f"error: {exc}")
        raise typer.Exit(code)


def _read_only_exit(exc: OSError) -> None:
    """A read-only folder (output, cache, data) is the user's to fix, not an rlft crash: one line, exit 2."""
    if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        raise exc
    err(f"error: cannot write {exc.filename or 'a file'}: {exc.strerror}; make it writable or point rlft "
         f"elsewhere (train.output_dir, RLFT_CACHE, HF_HOME)")
    raise typer.Exit(2)


def load(stage: str, hw: str, files: Optional[List[Path]], overrides: Optional[List[str]], *, for_train=False,
          trains=True):
    """Compose + validate, turning ConfigError into printed problems and exit code 2."""
    from rlft.config.compose import compose
    from rlft.config.validate import validate

    with exits("config invalid: {errors}"):
        composed = compose(stage, hw, files or [], overrides or [])
        cfg, warnings = validate(composed, for_train=for_train, trains=trains)
    print_problems(warnings)
    return cfg, composed


def auto_hw(hw: str) -> str:
    """`--hw auto` for the config commands: the profile training would pick, found without torch."""
    if hw != "auto":
        return hw
    from rlft.launch.processes import guess_hw

    hw, why = guess_hw()
    err(f"rlft: --hw auto would pick `{hw}`: {why} (found without importing torch; `rlft train --hw auto` asks torch)")
    return hw


def no_flags_with_smoke(**flags: bool) -> None:
    given = [f"--{name.replace('_', '-')}" for name, on in flags.items() if on]
    if given:
        err(f"error: {given[0]} does not go with --smoke: a smoke run starts its own folder under runs/smoke/ "
             f"each time (and resumes it itself)")
        raise typer.Exit(2)


def quiet() -> None:
    from rlft.runtime import quiet_libraries

    quiet_libraries(False)
