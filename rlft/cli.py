"""The `rlft` command line: the Typer app, with each verb registered from its module in rlft/commands/. Heavy
libraries (torch, transformers, TRL, PEFT, datasets, accelerate) are imported only inside the commands that train
or inspect the environment, so `--help`, `validate-config`, `show-config` and `list` start in a fraction of a
second."""

from __future__ import annotations

import os
import sys

import typer

from rlft.commands.env import env
from rlft.commands.eval import eval_cmd, export_cmd, generate_cmd
from rlft.commands.pipeline import pipeline_run, pipeline_show, pipeline_validate
from rlft.commands.plan import plan_cmd
from rlft.commands.report import report
from rlft.commands.rewards import rewards_try
from rlft.commands.tiny_model import tiny_model
from rlft.commands.train import train
from rlft.commands.validate import keys_cmd, list_profiles, show_config, validate_config
from rlft.config.stages import STAGES  # the help text needs only these names, not the schema

# one place for the exit codes: `rlft --help` prints them and the README lists the same
EXIT_CODES = (
    (0, "done"),
    (1, "internal error (a bug: please report it with `rlft env`)"),
    (2, "bad config or input (the message names the key, file and allowed values)"),
    (3, "hardware preflight failed (the profile does not fit this machine)"),
    (4, "stopped by a health rule or by reward failures (a checkpoint was written); `rewards try --strict`: a "
        "reward failed or has no signal"),
    (130, "interrupted by Ctrl-C or SIGTERM (a checkpoint was written; resume with --resume)"),
)
EPILOG = "Exit codes: " + "; ".join(f"{code} {what}" for code, what in EXIT_CODES) + "."

APP_SETTINGS = dict(
    name="rlft",
    help=f"RL fine-tuning of causal LMs from layered YAML profiles; stages (--stage): {', '.join(STAGES)}.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app = typer.Typer(**APP_SETTINGS)


def _version(value: bool) -> None:
    if value:
        from rlft import __version__

        typer.echo(f"rlft {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print rlft's version and exit.")) -> None:
    """RL fine-tuning of causal LMs from layered YAML profiles (the stages are listed in the app's help)."""


# the verbs, in the order `rlft --help` lists them
VERBS = (("validate-config", validate_config), ("show-config", show_config), ("plan", plan_cmd),
         ("list", list_profiles), ("keys", keys_cmd), ("env", env), ("tiny-model", tiny_model), ("train", train),
         ("report", report), ("eval", eval_cmd), ("generate", generate_cmd), ("export", export_cmd))
PIPELINE_VERBS = (("validate", pipeline_validate), ("show", pipeline_show), ("run", pipeline_run))
REWARDS_VERBS = (("try", rewards_try),)

pipeline_app = typer.Typer(help="Run several stages in order, each starting from the one before it.",
                           no_args_is_help=True)
rewards_app = typer.Typer(help="Reward-function tools that need no training.", no_args_is_help=True)
for group, verbs in ((app, VERBS), (pipeline_app, PIPELINE_VERBS), (rewards_app, REWARDS_VERBS)):
    for name, verb in verbs:
        group.command(name)(verb)
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(rewards_app, name="rewards")


def app_for(argv: list[str]) -> typer.Typer:
    """The app to run `argv` (the arguments after `rlft`): for one of VERBS, an app of the same settings with
    only that verb, since Typer builds every command's options from its signature before it parses (~25 ms
    for all of them, a tenth of `rlft validate-config`); what it prints is the same. Anything else (no verb,
    an option first, a group, a misspelt verb): the whole app."""
    verb = dict(VERBS).get(argv[0]) if argv else None
    if verb is None:
        return app
    one = typer.Typer(**APP_SETTINGS)
    one.callback()(_root)
    one.command(argv[0])(verb)
    return one


def main() -> None:
    from rlft.progress import every_problem

    problem = every_problem()  # the progress period, read by every long command: refused up front, not mid-run
    if problem:
        typer.echo(f"error: {problem}", err=True)
        sys.exit(2)
    try:
        app_for(sys.argv[1:])()
    except SystemExit as exc:
        if os.environ.get("RLFT_LAUNCHED"):  # a rank: its code for the launching process
            from rlft.runtime.ranks import exit_rank

            exit_rank(exc.code)
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
