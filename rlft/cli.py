"""The `rlft` command line. Heavy libraries (torch, transformers, TRL, PEFT, datasets, accelerate)
are imported only inside the commands that train or inspect the environment, so `--help`,
`validate-config`, `show-config` and `list` start in a fraction of a second."""

from __future__ import annotations

import errno
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from rlft.config.errors import ConfigError, Problem
from rlft.config.stages import DEFAULT_STAGE, HARDWARE, STAGES  # the help text needs only these names, not the schema

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

app = typer.Typer(
    name="rlft",
    help=f"RL fine-tuning of causal LMs from layered YAML profiles; stages (--stage): {', '.join(STAGES)}.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from rlft import __version__

        typer.echo(f"rlft {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print rlft's version and exit.")) -> None:
    """RL fine-tuning of causal LMs from layered YAML profiles (the stages are listed in the app's help)."""

STAGE_OPT = typer.Option(DEFAULT_STAGE, "--stage", "-s", help=f"Stage profile: {', '.join(STAGES)}.")
HW_OPT = typer.Option("cpu", "--hw", help=f"Hardware profile: {', '.join(HARDWARE)}, or auto (picked from the GPUs "
                                          "visible here).")
FILES_OPT = typer.Option(None, "--config", "-c", help="Your YAML file(s), applied in order after the profiles.")
OVERRIDES_ARG = typer.Argument(None, help="KEY=VALUE overrides, applied last (e.g. train.learning_rate=1e-5).")
SMOKE_HELP = ("Smoke-test this config on the CPU (for CI): the same stage, data, rewards and settings on a tiny model "
              "of the same family, one CPU process, a few steps with a checkpoint, --resume, report and the final "
              "model loaded; runs go to runs/smoke/, and summary.json's smoke block lists what was replaced.")


def _err(text: str) -> None:
    typer.echo(text, err=True)


MAX_SHOWN_PROBLEMS = 50  # a pasted 10 MB file should not print 276,000 lines


def _print_problems(problems: list[Problem]) -> None:
    """Errors first, then warnings; at most MAX_SHOWN_PROBLEMS lines, with a count of the rest."""
    ordered = [p for p in problems if p.level == "error"] + [p for p in problems if p.level != "error"]
    for p in ordered[:MAX_SHOWN_PROBLEMS]:
        _err(str(p))
    rest = ordered[MAX_SHOWN_PROBLEMS:]
    if rest:
        n_err = sum(p.level == "error" for p in rest)
        _err(f"... and {len(rest)} more problem{'s' if len(rest) != 1 else ''} not shown "
             f"({n_err} error{'s' if n_err != 1 else ''}, {len(rest) - n_err} "
             f"warning{'s' if len(rest) - n_err != 1 else ''})")


# rlft's own errors that end a command with "error: <message>" and this exit code (None: the error's own
# `exit_code`), as (module, class): looked up among the modules already imported, so checking imports nothing
USER_ERRORS = (("rlft.errors", "RunError", None), ("rlft.models.weights", "ModelLoadError", 2),
               ("rlft.stages", "StageNotBuilt", 2), ("rlft.rundir.markers", "FolderRefused", 2),
               ("rlft.monitor.report.load", "ReportInputError", 2), ("rlft.reward_try", "TryError", 2))


def _exit_code(exc: BaseException) -> int | None:
    for module, name, code in USER_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(exc, cls):
            return exc.exit_code if code is None else code
    return None


@contextmanager
def _exits(config_note: Optional[str] = None, *, read_only: bool = False):
    """The one mapping from errors to what the user sees and the exit code, around a command's work: a
    ConfigError prints its problems (then `config_note`, `{errors}` filled with their count), exit 2; rlft's
    own errors (USER_ERRORS) one line; `read_only`: a folder that cannot be written, one line, exit 2."""
    try:
        yield
    except ConfigError as exc:
        _print_problems(exc.problems)
        if config_note:
            n = sum(p.level == "error" for p in exc.problems)
            _err(config_note.format(errors=f"{n} error{'s' if n != 1 else ''}"))
        raise typer.Exit(2)
    except OSError as exc:
        if not read_only:
            raise
        _read_only_exit(exc)
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        _err(f"error: {exc}")
        raise typer.Exit(code)


def _load(stage: str, hw: str, files: Optional[List[Path]], overrides: Optional[List[str]], *, for_train=False,
          trains=True):
    """Compose + validate, turning ConfigError into printed problems and exit code 2."""
    from rlft.config.compose import compose
    from rlft.config.validate import validate

    with _exits("config invalid: {errors}"):
        composed = compose(stage, hw, files or [], overrides or [])
        cfg, warnings = validate(composed, for_train=for_train, trains=trains)
    _print_problems(warnings)
    return cfg, composed


def _auto_hw(hw: str) -> str:
    """`--hw auto` for the config commands: the profile training would pick, found without torch."""
    if hw != "auto":
        return hw
    from rlft.launch import guess_hw

    hw, why = guess_hw()
    _err(f"rlft: --hw auto would pick `{hw}`: {why} (found without importing torch; `rlft train --hw auto` asks torch)")
    return hw


@app.command("validate-config")
def validate_config(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
                    overrides: Optional[List[str]] = OVERRIDES_ARG) -> None:
    """Check a config without importing torch: every problem at once, exit 2 if any."""
    hw = _auto_hw(hw)
    cfg, composed = _load(stage, hw, config, overrides)
    _memory_warning(cfg, composed, hw)
    rewards = ", ".join(r.name or r.fn for r in cfg.rewards) or "none"
    adapter = f"LoRA r={cfg.lora.r} alpha={cfg.lora.lora_alpha}" if cfg.lora.enabled else "full fine-tuning"
    precision = "bf16" if cfg.train.bf16 else "fp16" if cfg.train.fp16 else "fp32"
    typer.echo(f"config OK: stage {stage}, hw {hw} ({cfg.hw.device}, {precision}, {cfg.hw.num_processes} process"
               f"{'es' if cfg.hw.num_processes > 1 else ''}), model {cfg.model.name_or_path}, {adapter}, "
               f"lr {cfg.train.learning_rate:g}, data {cfg.data.train or 'unset'}, rewards: {rewards}; "
               f"{len(composed.layers)} layers")


@app.command("show-config")
def show_config(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
                overrides: Optional[List[str]] = OVERRIDES_ARG,
                explain: bool = typer.Option(False, "--explain", help="Name the layer that set each key.")) -> None:
    """Print the resolved config as YAML (with --explain: where each value came from)."""
    from rlft.config.render import explain_notes, render_yaml

    hw = _auto_hw(hw)
    cfg, composed = _load(stage, hw, config, overrides)
    typer.echo(render_yaml(cfg, composed if explain else None), nl=False)
    if explain:
        from rlft.config.init_from import describe_reference

        for note in explain_notes(cfg):
            typer.echo(note)
        typer.echo(f"# reference (model.ref={cfg.model.ref}): "
                   f"{describe_reference(cfg.model.ref, cfg.model.init_from, cfg.model.init_mode)}")


def _memory_warning(cfg, composed, hw: str) -> None:
    """validate-config names a planned peak above the device's memory (silent without the model's config.json).
    It plans at the config's limits: no tokenizer or data read, and a warning for the worst case any data
    within the limits can reach; `rlft plan` adds the peak of the data itself. A config.json that is there but
    damaged (a size that is not a whole number in range) skips the check with one warning naming file and field."""
    from rlft.plan import plan_for
    from rlft.plan.model_shape import DamagedConfig, ShapeError

    try:
        plan = plan_for(cfg, hw, from_data=False)
    except DamagedConfig as exc:
        _print_problems([Problem("model.name_or_path", composed.layer_of("model.name_or_path"),
                                 f"memory not planned: {exc}", level="warning")])
        return
    except ShapeError:
        return
    if plan.fits is False:
        from rlft.plan.advise import dominant

        top = ", ".join(f"{name} {share:.0%}" for name, share in dominant(plan))
        _print_problems([Problem("hw.device_memory_gb", composed.layer_of("hw.device_memory_gb"),
                                 f"planned peak {plan.peak / 2**30:.1f} GiB per device does not fit in "
                                 f"{plan.device_bytes / 2**30:.1f} GiB at the config's limits ({top}); `rlft plan` "
                                 f"with the same arguments shows every term, the peak of this data and what to "
                                 f"change first", level="warning")])


@app.command("plan")
def plan_cmd(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
             overrides: Optional[List[str]] = OVERRIDES_ARG,
             json_out: bool = typer.Option(False, "--json", help="One JSON object: peak_gb, terms, device_gb, "
                                                                 "fits, basis (data or limits), worst_case.")) -> None:
    """Plan the peak memory per device, term by term, from the config, the model's config.json and the training
    data's token lengths (no torch); the worst case at the config's limits too."""
    from rlft.plan import plan_for
    from rlft.plan.model_shape import ShapeError
    from rlft.plan.render import report

    hw = _auto_hw(hw)
    cfg, composed = _load(stage, hw, config, overrides)
    try:
        plan = plan_for(cfg, hw)
    except ShapeError as exc:
        _err(f"error: model.name_or_path ({composed.layer_of('model.name_or_path')}): {exc}")
        raise typer.Exit(2)
    typer.echo(report(cfg, plan, json_out))


@app.command("list")
def list_profiles() -> None:
    """List stages, hardware profiles and example configs, one line each."""
    from rlft.config.compose import configs_dir, display_path
    from rlft.config.render import first_comment_line
    from rlft.config.stages import SPECS

    with _exits():
        root = configs_dir()
    typer.echo("Stages (--stage):")
    for s in STAGES:
        tags = [t for t, on in (("experimental", SPECS[s].experimental), ("not built yet", not SPECS[s].built)) if on]
        tag = f" [{', '.join(tags)}]" if tags else ""
        typer.echo(f"  {s:<9}{first_comment_line(root / 'stages' / f'{s}.yaml')}{tag}")
    typer.echo("Hardware profiles (--hw):")
    for h in HARDWARE:
        typer.echo(f"  {h:<9}{first_comment_line(root / 'hw' / f'{h}.yaml')}")
    typer.echo("Example configs (-c):")
    for path in sorted((root / "examples").glob("*.yaml")):
        typer.echo(f"  {display_path(path)}: {first_comment_line(path)}")


@app.command("keys")
def keys_cmd(prefix: str = typer.Argument("", help="Show the keys that start with this (e.g. grpo.kl); none: every "
                                                   "key.")) -> None:
    """List config keys from the schema: type, default, allowed values, the stages that read it, and help (no
    torch). An unknown prefix exits 2 with the closest keys."""
    from rlft.config.keys import closest, describe, matching

    found = matching(prefix)
    if not found:
        near = closest(prefix)
        _err(f"error: no config key starts with `{prefix}`" + (f"; closest: {', '.join(near)}" if near else ""))
        raise typer.Exit(2)
    typer.echo("\n".join(describe(k) for k in found))


@app.command("env")
def env() -> None:
    """Versions and visible devices: paste this into a bug report."""
    from rlft.envinfo import collect_env

    for key, value in collect_env().items():
        typer.echo(f"{key + ':':<16}{value}")


@app.command("tiny-model")
def tiny_model(out_dir: Path = typer.Argument(..., help="Folder to write the model and tokenizer to (new, empty, or "
                                                        "a tiny model rlft wrote before)."),
               init_std: float = typer.Option(None, help="Weight init std, > 0 (default: rlft's learnable default)."),
               force: bool = typer.Option(False, "--force", help="Write into a folder that holds other "
                                                                 "files.")) -> None:
    """Build rlft's tiny causal LM (offline) into OUT_DIR."""
    if init_std is not None and not init_std > 0:  # NaN too
        _err(f"error: --init-std must be > 0 (got {init_std})")
        raise typer.Exit(2)
    import re

    from rlft.rundir.markers import Owned, claim_output
    from rlft.tiny import MARKER_FILE, WRITTEN_NAMES, build_tiny_model

    with _exits():  # a tiny model rlft wrote before is rebuilt only when it holds nothing but the build's files
        claim_output(out_dir, "tiny-model", force=force, what="folder",
                     made_before=lambda folder: (folder / MARKER_FILE).is_file(),
                     owned=Owned(files=tuple(map(re.escape, WRITTEN_NAMES))))
    kwargs = {} if init_std is None else {"init_std": init_std}
    path = build_tiny_model(out_dir, **kwargs)
    typer.echo(f"tiny model written to {path}")


@app.command("train")
def train(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
          overrides: Optional[List[str]] = OVERRIDES_ARG,
          resume: bool = typer.Option(False, "--resume", help="Continue the run in train.output_dir from its newest "
                                                              "checkpoint."),
          overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing non-empty run folder (the old "
                                         "one is moved to <name>.old and deleted at the new run's first checkpoint; "
                                         "one holding files rlft did not write is moved to <name>.replaced-<time> "
                                         "and kept)."),
          allow_config_change: bool = typer.Option(False, "--allow-config-change",
                                                   help="With --resume: continue with a changed config (changed keys "
                                                        "are listed; shape-changing keys are still refused)."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs and warnings."),
          smoke: bool = typer.Option(False, "--smoke", help=SMOKE_HELP),
          dry_run: bool = typer.Option(False, "--dry-run", help="Print the command(s) this would start for the "
                                       "resolved config and hardware (one `accelerate launch` line per machine) and "
                                       "exit, importing no torch; with a `slurm:` section, write "
                                       "<run folder>/launch.sbatch.")) -> None:
    """Train a stage: compose + validate the config, then run the stage's TRL trainer with rlft's hooks."""
    if dry_run:
        _dry_run_train(stage, hw, config, overrides, resume=resume, overwrite=overwrite, smoke=smoke)
    from rlft.monitor.streams import protect_std_streams

    protect_std_streams()  # `rlft train ... | head`: a closed pipe must not stop training
    from rlft.stages import get_runner

    if hw == "auto":
        from rlft.launch import detect_hw

        hw, why = detect_hw()
        _err(f"rlft: --hw auto picked `{hw}`: {why}")
    if smoke:  # validated as given first (exit 2 on its errors), then run on the CPU
        _no_flags_with_smoke(resume=resume, overwrite=overwrite, allow_config_change=allow_config_change)
        from rlft.smoke.run import smoke_train
        from rlft.smoke.validate import load_as_given

        with _exits("config invalid: {errors}"):
            cfg, composed, warnings = load_as_given(stage, hw, list(config or []), list(overrides or []))
        _print_problems(warnings)
        raise typer.Exit(smoke_train(stage, hw, list(config or []), list(overrides or []), cfg, composed, warnings,
                                     verbose))
    cfg, composed = _load(stage, hw, config, overrides, for_train=True)
    with _exits():
        runner = get_runner(stage)
    from rlft.launch import needs_launch, preflight, relaunch

    problems = preflight(cfg, hw)
    for p in problems:
        _err(f"error: {p}")
    if problems:
        raise typer.Exit(3)
    from rlft.rundir.options import RunOptions
    from rlft.rundir.prepare import check_writable

    opts = RunOptions(resume=resume, overwrite=overwrite, verbose=verbose, allow_config_change=allow_config_change,
                      argv=sys.argv[1:])
    # a ConfigError here: e.g. TRL rejected the settings while the stage built its trainer config
    with _exits("config invalid: TRL rejected the settings", read_only=True):
        check_writable(Path(cfg.train.output_dir or "runs"))  # before minutes of loading, not after
        code = relaunch(cfg, composed, opts, hw, sys.argv[1:]) if needs_launch(cfg) else runner(cfg, composed, opts)
    raise typer.Exit(code or 0)


def _dry_run_train(stage: str, hw: str, config: Optional[List[Path]], overrides: Optional[List[str]], *, resume: bool,
                   overwrite: bool, smoke: bool) -> None:
    """`train --dry-run`: the config resolved and checked as `train` does it (exit 2 on an error), then the launch
    commands printed (and the SLURM script written), without torch: `--hw auto` is guessed as validate-config does."""
    if smoke:
        _err("error: --dry-run does not go with --smoke: a smoke run is one CPU process that rlft starts itself")
        raise typer.Exit(2)
    hw = _auto_hw(hw)
    cfg, _ = _load(stage, hw, config, overrides, for_train=True)
    from rlft.config.stages import get_spec
    from rlft.dry_run import dry_run
    from rlft.rundir.options import RunOptions

    with _exits(read_only=True):
        if get_spec(stage).runner is None:  # `train` refuses a stage that is not built yet (imports no runner)
            from rlft.stages import get_runner

            get_runner(stage)
        plan = dry_run(cfg, RunOptions(resume=resume, overwrite=overwrite, argv=sys.argv[1:]), hw, sys.argv[1:])
    typer.echo(plan.text, nl=False)
    raise typer.Exit(0)


def _no_flags_with_smoke(**flags: bool) -> None:
    given = [f"--{name.replace('_', '-')}" for name, on in flags.items() if on]
    if given:
        _err(f"error: {given[0]} does not go with --smoke: a smoke run starts its own folder under runs/smoke/ "
             f"each time (and resumes it itself)")
        raise typer.Exit(2)


def _read_only_exit(exc: OSError) -> None:
    """A read-only folder (output, cache, data) is the user's to fix, not an rlft crash: one line, exit 2."""
    if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        raise exc
    _err(f"error: cannot write {exc.filename or 'a file'}: {exc.strerror}; make it writable or point rlft "
         f"elsewhere (train.output_dir, RLFT_CACHE, HF_HOME)")
    raise typer.Exit(2)


@app.command("report")
def report(runs: List[Path] = typer.Argument(..., help="Run folder(s), or jsonl files of completion rows (as `rlft "
                                                    "rewards try` writes); several are overlaid on the same graphs."),
           out: Optional[Path] = typer.Option(None, "--out", "-o",
                                              help="Output folder: new, empty, or a report rlft wrote before "
                                                   "(default: report/ in the first run's folder)."),
           max_chars: int = typer.Option(4000, "--max-chars", min=100,
                                         help="Characters of each completion kept in the page (the jsonl keeps all)."),
           force: bool = typer.Option(False, "--force", help="Write into an -o folder that holds other files "
                                                             "(index.html and graphs/ are replaced).")) -> None:
    """Write an offline HTML report (reward graphs, reward logs, completions browser) and one PNG per graph."""
    from rlft.monitor.report import build_report

    with _exits():
        res = build_report(runs, out, max_chars=max_chars, force=force)
    if res.note:
        _err(f"rlft report: {res.note}")
    typer.echo(f"report written to {res.index} ({res.graphs} graphs in {res.index.parent / 'graphs'}, "
               f"{res.completions} completions, {res.bytes / 1e6:.1f} MB, {res.seconds:.1f} s)")


TARGET_ARG = typer.Argument(..., help="A run folder (its final/ model), a checkpoint folder, a PEFT adapter folder "
                                      "or a transformers model folder.")
CHECKPOINT_OPT = typer.Option(None, "--checkpoint", help="With a run folder: use checkpoints/checkpoint-N instead of "
                                                         "final/.")


def _target(path: Path, checkpoint: Optional[int]):
    from rlft.posttrain import resolve_target

    with _exits():
        return resolve_target(path, checkpoint)


def _quiet() -> None:
    from rlft.runtime import quiet_libraries

    quiet_libraries(False)


@app.command("eval")
def eval_cmd(target: Path = TARGET_ARG, config: Optional[List[Path]] = FILES_OPT,
             overrides: Optional[List[str]] = OVERRIDES_ARG,
             stage: Optional[str] = typer.Option(None, "--stage", "-s", help="Stage profile (default: the run's)."),
             data: Optional[str] = typer.Option(None, "--data", help="Evaluation prompts (default: data.eval); `demo` "
                                                                     "= the built-in task."),
             n: int = typer.Option(4, "-n", min=1, help="Completions sampled per prompt."),
             max_prompts: Optional[int] = typer.Option(None, "--max-prompts", min=1, help="Evaluate the first N "
                                                                                          "prompts only."),
             out: Optional[Path] = typer.Option(None, "--out", "-o", help="Rows per completion (default: eval.jsonl in "
                                                                          "the run folder, else here)."),
             checkpoint: Optional[int] = CHECKPOINT_OPT,
             seed: Optional[int] = typer.Option(None, "--seed", help="Sampling seed (default: train.seed)."),
             force: bool = typer.Option(False, "--force", help="Replace an existing -o file.")) -> None:
    """Sample from a trained policy on evaluation prompts, score with the config's rewards, print the means."""
    from rlft.posttrain import eval_config_file, run_config

    tgt = _target(target, checkpoint)
    stage = stage or run_config(tgt.run_root).get("stage") or DEFAULT_STAGE
    files, own = list(config or []), None
    if not files and tgt.run_root is not None:  # the run's own config: same rewards, same sampling settings
        with _exits():  # e.g. a link planted where it goes: one line
            files = [own := eval_config_file(tgt.run_root, stage)]
    try:
        cfg, _ = _load(stage, "cpu", files, overrides, trains=False)  # samples and scores only
    finally:
        if own is not None:
            own.unlink(missing_ok=True)
    source = data or cfg.data.eval
    if not source:
        _err("error: no evaluation prompts: set data.eval in the config or pass --data FILE (or --data demo)")
        raise typer.Exit(2)
    dest = out or ((tgt.run_root / "eval.jsonl") if tgt.run_root is not None else Path("eval.jsonl"))
    from rlft.rundir.markers import check_output_file

    with _exits():  # before minutes of sampling, not after; a run's own eval.jsonl is rlft's to replace
        check_output_file(dest, force=force or (out is None and tgt.run_root is not None), what="-o file")
    _quiet()
    from rlft.posttrain import evaluate

    with _exits():
        res = evaluate(tgt, cfg, source, n, dest, max_prompts, seed)
    fmt = lambda x: "-" if x is None else f"{x:.4f}"  # noqa: E731
    typer.echo(f"eval of {res['model']} on {res['data']}: {res['prompts']} prompts x {n} = {res['completions']} "
               "completions")
    for name, value in res["rewards"].items():
        typer.echo(f"  {name:<24}{fmt(value)}")
    typer.echo(f"  {'total (weighted)':<24}{fmt(res['reward_mean'])}" +
               (f"   ({res['unscored']} completions unscored)" if res["unscored"] else ""))
    typer.echo(f"rows written to {res['out']}")


@app.command("generate")
def generate_cmd(target: Path = TARGET_ARG,
                 prompt: Optional[List[str]] = typer.Option(None, "--prompt", "-p", help="A prompt (repeatable)."),
                 file: Optional[Path] = typer.Option(None, "--file", "-f", help="A text file with one prompt per "
                                                                                "line."),
                 n: int = typer.Option(2, "-n", min=1, help="Completions per prompt."),
                 max_tokens: int = typer.Option(128, "--max-tokens", min=1, help="Longest completion (tokens)."),
                 temperature: float = typer.Option(1.0, "--temperature", min=0.0, help="Sampling temperature."),
                 top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0, help="Nucleus sampling threshold."),
                 seed: int = typer.Option(0, "--seed", help="Sampling seed."),
                 raw: bool = typer.Option(False, "--raw", help="Do not wrap prompts in the chat template."),
                 checkpoint: Optional[int] = CHECKPOINT_OPT) -> None:
    """Sample a few completions from a trained adapter or model (chat template applied when it has one)."""
    prompts = list(prompt or [])
    if file is not None:
        if not file.is_file():
            _err(f"error: --file {file}: no such file")
            raise typer.Exit(2)
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            _err(f"error: --file {file} is not UTF-8 text (byte {exc.start}): give a text file with one prompt per "
                 "line")
            raise typer.Exit(2)
        except OSError as exc:
            _err(f"error: --file {file}: {exc.strerror or exc}")
            raise typer.Exit(2)
        if "\0" in text:
            _err(f"error: --file {file} holds NUL bytes (a binary file?): give a text file with one prompt per line")
            raise typer.Exit(2)
        prompts += [line for line in text.splitlines() if line.strip()]
    if not prompts:
        _err("error: give at least one --prompt TEXT or --file FILE")
        raise typer.Exit(2)
    tgt = _target(target, checkpoint)
    _quiet()
    from rlft.posttrain import generate

    with _exits():
        rows = generate(tgt, prompts, n, max_tokens, temperature, top_p, seed, raw)
    last = None
    for row in rows:
        if row["prompt"] != last:
            typer.echo(f"=== {row['prompt']}")
            last = row["prompt"]
        typer.echo(f"--- {row['completion']}")


@app.command("export")
def export_cmd(target: Path = TARGET_ARG,
               out: Path = typer.Option(..., "--out", "-o", help="Folder to write (must not exist or be empty)."),
               merge: bool = typer.Option(False, "--merge", help="Merge the LoRA adapter into its base: a plain "
                                                                 "transformers model."),
               checkpoint: Optional[int] = CHECKPOINT_OPT) -> None:
    """Export a run's model: the adapter (base named as the run gave it) or, with --merge, a merged model folder."""
    from rlft.posttrain import check_export_dir

    tgt = _target(target, checkpoint)
    with _exits():
        check_export_dir(out)  # before loading anything
    _quiet()
    from rlft.posttrain import export

    with _exits():
        path = export(tgt, out, merge)
    kind = "merged model" if merge else "adapter"
    typer.echo(f"{kind} written to {path} (load with "
               f"{'AutoModelForCausalLM' if merge else 'PeftModel'}.from_pretrained)")


pipeline_app = typer.Typer(help="Run several stages in order, each starting from the one before it.",
                           no_args_is_help=True)
app.add_typer(pipeline_app, name="pipeline")
PIPELINE_ARG = typer.Argument(..., help="Pipeline file: `stages:` list and shared `defaults:`.")
PIPE_OVERRIDES = typer.Argument(None, help="KEY=VALUE for every stage, stages.<number or name>.KEY=VALUE for one.")
PIPE_HW = typer.Option("cpu", "--hw", help="Hardware profile of stages that name none.")


def _load_pipeline(path: Path, overrides: Optional[List[str]], hw: str, smoke: bool = False):
    from rlft.pipeline.spec import check_pipeline, load_pipeline

    with _exits("pipeline invalid: {errors}"):
        pipe = load_pipeline(path)
        if smoke:  # errors only this machine causes, on keys the smoke run replaces, are warnings
            from rlft.smoke.validate import check_pipeline_as_given as check_pipeline
        checked = check_pipeline(pipe, overrides or [], hw)
    for _, _, _, warnings in checked:
        _print_problems(warnings)
    return pipe, checked


@pipeline_app.command("validate")
def pipeline_validate(path: Path = PIPELINE_ARG, overrides: Optional[List[str]] = PIPE_OVERRIDES,
                      hw: str = PIPE_HW) -> None:
    """Check every stage of a pipeline without importing torch: each error names its stage, key, file and line."""
    pipe, checked = _load_pipeline(path, overrides, hw)
    stages = " -> ".join(f"{e.stage}" for e, *_ in checked)
    typer.echo(f"pipeline OK: {pipe.name}: {stages}; runs in {pipe.output_dir}/")


@pipeline_app.command("show")
def pipeline_show(path: Path = PIPELINE_ARG, overrides: Optional[List[str]] = PIPE_OVERRIDES,
                  hw: str = PIPE_HW) -> None:
    """Print each stage's resolved config with the layer of every key and what its reference is."""
    from rlft.config.init_from import describe_reference
    from rlft.config.render import render_yaml
    from rlft.config.stages import SPECS

    pipe, checked = _load_pipeline(path, overrides, hw)
    for i, (entry, cfg, composed, _) in enumerate(checked):
        typer.echo(f"# ---- {entry.label}: {entry.stage}, hw {entry.hw or hw}, run folder {pipe.stage_dir(entry)}")
        if not SPECS[entry.stage].uses_reference:
            typer.echo(f"# reference: none ({entry.stage} uses no reference model)"
                       + (f"; starts from {checked[i - 1][0].label}" if i and not entry.sets_init_from else ""))
        elif i and not cfg.model.init_from and not entry.sets_init_from:
            prev = checked[i - 1][0]
            typer.echo(f"# starts from {prev.label} ({pipe.stage_dir(prev)}), set when that stage has finished; "
                       f"reference: {describe_reference('init', pipe.stage_dir(prev), cfg.model.init_mode)}"
                       if not composed.set_by_user("model.ref") else
                       f"# starts from {prev.label} ({pipe.stage_dir(prev)}); reference: model.ref={cfg.model.ref}")
        else:
            typer.echo(f"# reference: {describe_reference(cfg.model.ref, cfg.model.init_from, cfg.model.init_mode)}")
        typer.echo(render_yaml(cfg, composed), nl=False)


@pipeline_app.command("run")
def pipeline_run(path: Path = PIPELINE_ARG, overrides: Optional[List[str]] = PIPE_OVERRIDES, hw: str = PIPE_HW,
                 resume: bool = typer.Option(False, "--resume", help="Skip finished stages, resume the interrupted "
                                                                     "one, go on."),
                 verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs and warnings."),
                 smoke: bool = typer.Option(False, "--smoke", help=SMOKE_HELP)) -> None:
    """Run the stages in order; runs go to <output_dir>/<NN>-<stage>/, each starting from the one before."""
    from rlft.monitor.streams import protect_std_streams

    protect_std_streams()  # `rlft pipeline run ... | head`: a closed pipe must not stop training
    if smoke:
        _no_flags_with_smoke(resume=resume)
    pipe, checked = _load_pipeline(path, overrides, hw, smoke)
    for entry, cfg, _, _ in checked:
        if cfg.hw.num_processes > 1:
            _err(f"{entry.label}: pipelines run each stage in one process in this version; use a single-process "
                 f"hardware profile or run the stage with `rlft train` (model.init_from= the stage before)")
            raise typer.Exit(2)
    if smoke:
        from rlft.smoke.run import smoke_pipeline

        raise typer.Exit(smoke_pipeline(pipe, checked, list(overrides or []), hw, verbose))
    from rlft.pipeline.runner import run_pipeline
    from rlft.rundir.prepare import check_writable

    with _exits(read_only=True):
        check_writable(pipe.output_dir, "pipeline folder", "output_dir")  # before minutes of loading, not after
        code = run_pipeline(pipe, overrides or [], hw, resume, verbose)
    raise typer.Exit(code)


rewards_app = typer.Typer(help="Reward-function tools that need no training.", no_args_is_help=True)
app.add_typer(rewards_app, name="rewards")


@rewards_app.command("try")
def rewards_try(config: Optional[List[Path]] = FILES_OPT, overrides: Optional[List[str]] = OVERRIDES_ARG,
                stage: Optional[str] = typer.Option(None, "--stage", "-s", help="Stage profile (default: the run's, "
                                                                                "else grpo)."),
                hw: str = HW_OPT,
                from_run: Optional[Path] = typer.Option(None, "--from-run", help="Re-score the completions a run "
                                                                                 "logged "
                                                        "(its config, then -c files, set the rewards) and show what "
                                                        "changed."),
                completions: Optional[Path] = typer.Option(None, "--completions", help="A jsonl of {\"row\": {prompt, "
                                                           "columns...} or \"prompt\": ..., \"completion\": ...} "
                                                           "rows."),
                sample: Optional[int] = typer.Option(None, "--sample", min=1, help="Sample N completions per prompt "
                                                     "from the configured model (no training) and score them."),
                max_prompts: int = typer.Option(8, "--max-prompts", min=1, help="With --sample: the first N prompts of "
                                                                                "data.train."),
                out: Path = typer.Option(Path("rewards_try.jsonl"), "--out", "-o", help="Scored rows, in "
                                                                                        "completions.jsonl's format."),
                force: bool = typer.Option(False, "--force", help="Replace an existing -o file."),
                strict: bool = typer.Option(False, "--strict", help="Exit 4 when a reward fails or has no "
                                                                    "signal.")) -> None:
    """Run the config's rewards on completions without training: per-reward statistics, failures with tracebacks,
    time per call, prompts without signal, and a verdict."""
    from rlft.reward_try import check_sources, run_config_file, run_stage, try_rewards

    files, own = list(config or []), None
    with _exits():
        check_sources(from_run, completions, sample, out, force, max_prompts)
        # the paths named here, as meant now: a reward's code (imported below) may chdir, which must not move them
        shown, out = out, Path(os.path.abspath(out))
        from_run, completions = (None if p is None else Path(os.path.abspath(p)) for p in (from_run, completions))
        if from_run is not None:  # the run's own config first: its data rows, and its rewards unless -c sets others
            stage = stage or run_stage(from_run)
            own = run_config_file(from_run, stage)
            files.insert(0, own)
    try:
        cfg, composed = _load(stage or DEFAULT_STAGE, hw, files, overrides, trains=False)  # scores only
    finally:
        if own is not None:
            own.unlink(missing_ok=True)
    with _exits():
        code = try_rewards(cfg, composed, from_run=from_run, completions=completions, sample=sample,
                           max_prompts=max_prompts, out=out, strict=strict, echo=typer.echo, force=force,
                           shown=shown)
    raise typer.Exit(code)


def main() -> None:
    try:
        app()
    except SystemExit as exc:
        if os.environ.get("RLFT_LAUNCHED"):  # a rank: its code for the launching process
            from rlft.runtime.ranks import exit_rank

            exit_rank(exc.code)
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
