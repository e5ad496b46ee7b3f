"""`--smoke` for `rlft train` and `rlft pipeline run`: after the config was composed and validated as given, each
stage runs on the CPU with `rlft.smoke.changes` as its last layer, stops at its first checkpoint as Ctrl-C would
and is resumed from it to its last step; then every run folder is checked (`rlft.smoke.checks`), reported
(`rlft report`'s function), and its final model loaded and asked for a few tokens (`rlft generate`'s). The
outcome goes into each summary.json as a `smoke` block and onto the screen; the exit code is 0 only when all
of it worked, else the run's own code (or 1) with one line saying what failed."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlft.config.errors import ConfigError
from rlft.models.config_json import ConfigJsonError
from rlft.smoke.changes import Change, ModelChoice, as_layer, choose_model, smoke_changes
from rlft import run_files

SMOKE_ROOT = Path("runs") / "smoke"
RESUME_HINT = "(the smoke test resumes it itself)"
GENERATE_TOKENS = 8


def _say(text: str) -> None:
    print(f"rlft smoke: {text}", file=sys.stderr, flush=True)


def smoke_dir(name: str) -> Path:
    """runs/smoke/<name>-<timestamp>, never an existing folder: a smoke run is never mistaken for a real one."""
    base = SMOKE_ROOT / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


@dataclass
class StageRun:
    label: str               # "grpo", or "stage 2 (rs_sft)" in a pipeline
    stage: str
    root: Path
    changes: list[Change]
    samples: bool            # the stage samples and scores completions
    env: bool                # multi-turn episodes against env.name
    max_failure_fraction: float = 0.5  # monitor.max_reward_failure_fraction


@dataclass
class Outcome:
    code: int = 0
    failure: str | None = None                       # the one line saying what failed
    tested: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    stopped: dict[str, int] = field(default_factory=dict)  # run folder -> the step its first run stopped at

    def fail(self, code: int, line: str) -> None:
        if self.failure is None:
            self.code, self.failure = code, line


def _problems_text(exc: ConfigError) -> list[str]:
    return [str(p) for p in exc.problems if p.level == "error"] or [str(p) for p in exc.problems]


def _call(fn: Callable[[], int]) -> tuple[int, str | None]:
    """(exit code, the one-line error) of running a stage, as `rlft train` maps its errors."""
    import errno

    from rlft.models.weights import ModelLoadError
    from rlft.errors import RunError

    try:
        return int(fn() or 0), None
    except ConfigError as exc:
        lines = _problems_text(exc)
        for line in lines:
            print(line, file=sys.stderr)
        return 2, lines[0] if lines else "config invalid"
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code, str(exc).splitlines()[0]
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2, str(exc)
    except Exception as exc:  # noqa: BLE001 - a crash is the smoke test's finding: shown, then summarised
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            line = f"cannot write {exc.filename or 'a file'}: {exc.strerror}"
            print(f"error: {line}", file=sys.stderr)
            return 2, line
        import traceback

        traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        return 1, f"{type(exc).__name__}: {first} (an internal error: the traceback is above)"


def _failure_line(run: StageRun, code: int, error: str | None) -> str:
    from rlft.monitor.summary import read_summary

    summary = read_summary(run.root / run_files.SUMMARY)
    known = {3: "hardware preflight failed", 4: "stopped by a health rule or by reward failures", 130: "interrupted"}
    why = error or (summary or {}).get("error") or known.get(code) or (
        "failed" if summary is not None else "failed before its run folder was made (the error is printed above)")
    return f"{run.label}: exit {code}: {str(why).splitlines()[0]}"


# -- after the runs ----------------------------------------------------------------------------------
def _first_prompt(root: Path) -> str:
    from rlft.smoke.checks import read_rows

    for row in read_rows(root / run_files.COMPLETIONS)[:1]:
        if isinstance(row.get("prompt"), str) and row["prompt"].strip():
            return row["prompt"]
    return "Hello"


def _load_and_generate(root: Path) -> str:
    """Load the run's final model as `rlft generate` does and sample a few tokens; what was tested, in words."""
    from rlft.posttrain.generate import generate
    from rlft.posttrain.target import resolve_target

    target = resolve_target(root)
    rows = generate(target, [_first_prompt(root)], 1, GENERATE_TOKENS, 1.0, 1.0, 0)
    kind = "PEFT adapter on its base" if target.is_adapter else "full model"
    return f"final model loaded ({kind}) and sampled: {rows[0]['completion'][:40]!r}"


def check_and_report(run: StageRun, outcome: Outcome) -> list[str]:
    """The run folder's checks, its report and its final model; what each showed (problems into `outcome`)."""
    from rlft.smoke.checks import check_run

    check = check_run(run.root, run.samples, run.env, run.max_failure_fraction)
    tested = list(check.tested)
    for p in check.problems:
        outcome.problems.append(f"{run.label}: {p}")
    if check.problems:
        outcome.fail(check.code, f"{run.label}: {check.problems[0]}")
    if not (run.root / run_files.SUMMARY).is_file():
        return tested
    tested.append(f"{run_files.SUMMARY} written")
    try:
        from rlft.monitor.report import build_report

        res = build_report([run.root])
        tested.append(f"rlft report: {res.index} ({res.graphs} graphs, {res.completions} completions)")
    except Exception as exc:  # noqa: BLE001 - any failure of the report is the finding
        outcome.fail(1, f"{run.label}: rlft report failed: {type(exc).__name__}: {exc}")
    if (run.root / run_files.FINAL).is_dir():
        try:
            tested.append(_load_and_generate(run.root))
        except Exception as exc:  # noqa: BLE001 - any failure to load the model is the finding
            outcome.fail(1, f"{run.label}: the final model does not load: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}")
    return tested


def _untested(changes: list[Change], resumed: bool) -> list[str]:
    seen: list[str] = []
    for c in changes:
        if c.untested and c.untested not in seen:
            seen.append(c.untested)
    if not resumed:
        seen.append("--resume (the run ended before a checkpoint was complete)")
    return seen


def _not_checked(warnings: list) -> list[str]:
    from rlft.smoke.validate import NOT_CHECKED, unchecked

    return [f"{w.stage + ': ' if w.stage else ''}the check of {w.key} ({w.message[len(NOT_CHECKED):]})"
            for w in unchecked(warnings)]


def write_block(path: Path, block: dict) -> None:
    """Add the `smoke` block to a summary file (atomically, like the summary itself)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict):
        return
    data["smoke"] = block
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _fmt(value) -> str:
    text = value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else json.dumps(value,
                                                                                                         default=str)
    return text if len(text) <= 48 else text[:45] + "..."


def screen(title: str, runs: list[StageRun], outcome: Outcome, not_tested: list[str], wall: float,
           details: Path) -> str:
    """The one-screen summary: what was replaced (size changes on one line), tested, not tested."""
    lines = [title]
    by_key: dict[str, list[tuple[str, Change]]] = {}
    for run in runs:
        for c in run.changes:
            by_key.setdefault(c.key, []).append((run.label, c))
    big = [k for k, v in by_key.items() if v[0][1].kind not in ("size", "monitor")]
    if big:
        lines.append("replaced (as given -> smoke run: why):")
    for key in big:
        items = by_key[key]
        distinct = {(_fmt(c.was), _fmt(c.now)) for _, c in items}
        where = "" if len(items) == len(runs) or len(runs) == 1 else f" [{', '.join(label for label, _ in items)}]"
        was, now = next(iter(distinct)) if len(distinct) == 1 else ("varies", "varies")
        lines.append(f"  {key}{where}: {was} -> {now}: {items[0][1].why}")
    small = [f"{k}={_fmt(v[0][1].now)}" for k, v in by_key.items() if v[0][1].kind == "size"]
    if small:
        lines.append("  size (a few steps on the first rows): " + ", ".join(small))
    watch = [f"{k}={_fmt(v[0][1].now)}" for k, v in by_key.items() if v[0][1].kind == "monitor"]
    if watch:
        lines.append("  monitor: " + ", ".join(watch) + " (a random model's health numbers mean nothing)")
    lines.append("tested:")
    lines += [f"  {t}" for t in outcome.tested]
    if not_tested:
        lines.append("not tested: " + "; ".join(n if len(n) <= 100 else n[:97] + "..." for n in not_tested))
    for p in outcome.problems[:5]:
        lines.append(f"problem: {p}")
    lines.append(f"wall time {wall:.1f} s; every change with its reason: {details} (`smoke` block)")
    return "\n".join(lines)


def _finish(title: str, runs: list[StageRun], outcome: Outcome, not_tested: list[str], t0: float,
            summaries: list[tuple[Path, list[dict]]], details: Path, config: dict) -> int:
    wall = time.monotonic() - t0
    result = "passed" if outcome.code == 0 else "failed"
    for path, changes in summaries:
        write_block(path, {"result": result, "exit_code": outcome.code, "failure": outcome.failure, "config": config,
                           "replaced": changes, "tested": outcome.tested,
                           "not_tested": not_tested, "problems": outcome.problems, "wall_s": round(wall, 1)})
    head = f"rlft smoke: {'PASSED' if outcome.code == 0 else 'FAILED'} (exit {outcome.code}) in {wall:.1f} s: {title}"
    print(screen(head, runs, outcome, not_tested, wall, details), flush=True)
    if outcome.failure:
        print(f"rlft smoke: FAILED: {outcome.failure}", file=sys.stderr, flush=True)
    return outcome.code


# -- rlft train --smoke ------------------------------------------------------------------------------
def smoke_train(stage: str, hw: str, files: list[Path], overrides: list[str], cfg0, composed0, warnings: list,
                verbose: bool = False) -> int:
    """`rlft train ... --smoke` after its config was composed and validated as given (cfg0, composed0, and the
    warnings, among them the errors only this machine caused: rlft.smoke.validate)."""
    from rlft.config.compose import compose
    from rlft.config.stages import get_spec
    from rlft.config.validate import validate
    from rlft.launch.processes import preflight
    from rlft.rundir.options import RunOptions
    from rlft.smoke.interrupt import stop_at_first_checkpoint
    from rlft.stages import get_runner

    t0 = time.monotonic()
    spec = get_spec(stage)
    runner = get_runner(stage)
    try:
        choice = choose_model(cfg0.model.name_or_path)
    except ConfigJsonError as exc:  # the real run would fail on it too: one line, nothing built or run
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = smoke_dir(stage)
    changes = smoke_changes(cfg0, composed0, choice, str(root))
    layer = as_layer(changes)
    _say(f"{stage} on {hw} is valid as given; running it on the CPU in {root} with {len(changes)} changes "
         f"(model: {choice.path})")

    run = StageRun(stage, stage, root, changes, spec.samples, bool(spec.uses_env and cfg0.env.name),
                   cfg0.monitor.max_reward_failure_fraction)
    outcome = Outcome()

    def load_composed():
        composed = compose(stage, hw, files, overrides, last=[layer])
        return validate(composed, for_train=True)[0], composed

    try:
        cfg, _ = load_composed()
    except ConfigError as exc:
        for line in _problems_text(exc):
            print(line, file=sys.stderr)
        outcome.fail(1, f"the smoke settings are not valid for this config (an rlft bug): {_problems_text(exc)[0]}")
        return _finish(stage, [run], outcome, [], t0, [], root, {})
    problems = preflight(cfg, "cpu")
    if problems:
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        outcome.fail(3, f"preflight on the CPU: {problems[0]}")
        return _finish(stage, [run], outcome, [], t0, [], root, {})

    def attempt(resume: bool) -> tuple[int, str | None]:
        def go() -> int:  # composed afresh: a run may change its typed config (e.g. train.output_dir)
            cfg, composed = load_composed()
            return runner(cfg, composed, RunOptions(resume=resume, verbose=verbose, resume_hint=RESUME_HINT))
        return _call(go)

    with stop_at_first_checkpoint() as stopped:
        code, error = attempt(resume=False)
        if code == 130 and _key(root) in stopped:
            _say(f"resuming {root} from its checkpoint at step {stopped[_key(root)]} (--resume)")
            code, error = attempt(resume=True)
            if code == 0:
                outcome.tested.append(f"checkpoint at step {stopped[_key(root)]}, then --resume from it to the end")
    outcome.stopped = dict(stopped)
    skipped = len(_not_checked(warnings))
    outcome.tested.insert(0, f"compose + validate as given (--hw {hw}: {cfg0.hw.device}, "
                             f"{cfg0.hw.num_processes} process{'es' if cfg0.hw.num_processes > 1 else ''})"
                             + (f", but for {skipped} check(s) this machine cannot make" if skipped else ""))
    if choice.family:
        outcome.tested.insert(1, f"the tokenizer and chat template of `{choice.name}`")
    if code != 0:
        outcome.fail(code, _failure_line(run, code, error))
    outcome.tested += check_and_report(run, outcome)
    config = {"command": "train", "stage": stage, "hw": hw, "files": [str(f) for f in files], "overrides": overrides}
    not_tested = _untested(changes, resumed=_key(root) in stopped) + _not_checked(warnings)
    return _finish(f"{stage} (--hw {hw}) in {root}", [run], outcome, not_tested, t0,
                   [(root / run_files.SUMMARY, [c.as_dict() for c in changes])], root / run_files.SUMMARY, config)


# -- rlft pipeline run --smoke -----------------------------------------------------------------------
def smoke_pipeline(pipe, checked: list, overrides: list[str], hw: str, verbose: bool = False) -> int:
    """`rlft pipeline run ... --smoke` after every stage was composed and validated as given (`checked`)."""
    from rlft.config.stages import get_spec
    from rlft.pipeline.runner import SUMMARY, run_pipeline
    from rlft.rundir.resume_keys import saved_config
    from rlft.smoke.interrupt import stop_at_first_checkpoint

    t0 = time.monotonic()
    spipe = dataclasses.replace(pipe, output_dir=smoke_dir(pipe.name))
    choices: dict[str, ModelChoice] = {}
    runs: list[StageRun] = []
    layers: dict[int, list] = {}
    for entry, cfg0, composed0, _ in checked:
        name = cfg0.model.name_or_path
        try:
            choice = choices.get(name) or choices.setdefault(name, choose_model(name))
        except ConfigJsonError as exc:  # the real run would fail on it too: one line, nothing built or run
            print(f"error: {entry.label}: {exc}", file=sys.stderr)
            return 2
        changes = smoke_changes(cfg0, composed0, choice, None, own_init_from=entry.sets_init_from)
        layers[entry.index] = [as_layer(changes)]
        spec = get_spec(entry.stage)
        runs.append(StageRun(entry.label, entry.stage, spipe.stage_dir(entry), changes, spec.samples,
                             bool(spec.uses_env and cfg0.env.name), cfg0.monitor.max_reward_failure_fraction))
    stages = " -> ".join(e.stage for e, *_ in checked)
    _say(f"pipeline {pipe.name} ({stages}) is valid as given; running it on the CPU in {spipe.output_dir} "
         f"(model: {', '.join(f'{n} -> {c.path}' for n, c in choices.items())})")
    outcome = Outcome()
    code, error = 0, None
    with stop_at_first_checkpoint() as stopped:
        resume = False
        while True:
            before = len(stopped)
            code, error = _call(lambda again=resume: run_pipeline(spipe, overrides, hw, again, verbose,
                                                                  stage_layers=layers))
            if code != 130 or len(stopped) == before:  # done, failed, or a real Ctrl-C
                break
            _say(f"resuming the pipeline from the checkpoint at step {list(stopped.values())[-1]} (--resume)")
            resume = True
    outcome.stopped = dict(stopped)
    hws = sorted({e.hw or hw for e, *_ in checked})
    outcome.tested.append(f"compose + validate as given of {len(checked)} stages (--hw {', '.join(hws)})")
    outcome.tested += [f"the tokenizer and chat template of `{n}`" for n, c in choices.items() if c.family]
    failed_at = None
    if code != 0:
        failed_at = next((r for r in runs if not _finished(r.root)), runs[-1])
        outcome.fail(code, _failure_line(failed_at, code, error))
    for i, run in enumerate(runs):
        if not run.root.is_dir():
            continue
        lines = []
        if _key(run.root) in stopped and (_finished(run.root)):
            lines.append(f"checkpoint at step {stopped[_key(run.root)]}, then --resume from it to the end")
        init_from = ((saved_config(run.root) or {}).get("model") or {}).get("init_from")
        if i and init_from and Path(str(init_from)).resolve() == runs[i - 1].root.resolve():
            lines.append(f"started from {runs[i - 1].label}'s model (model.init_from)")
        lines += check_and_report(run, outcome)
        outcome.tested += [f"{run.label}: {line}" for line in lines]
    missing = [r.label for r in runs if not r.root.is_dir()]
    if missing and failed_at is None:
        outcome.fail(1, f"{', '.join(missing)} did not run")
    not_tested: list[str] = []
    for run in runs:
        for item in _untested(run.changes, resumed=_key(run.root) in stopped or not run.root.is_dir()):
            if item not in not_tested:
                not_tested.append(item if not item.startswith("--resume") else f"{run.label}: {item}")
    for *_, warnings in checked:
        not_tested += [n for n in _not_checked(warnings) if n not in not_tested]
    config = {"command": "pipeline run", "file": str(pipe.path), "hw": hw, "overrides": overrides}
    summaries = [(r.root / run_files.SUMMARY, [c.as_dict() for c in r.changes]) for r in runs
                 if (r.root / run_files.SUMMARY).is_file()]
    summaries.append((spipe.output_dir / SUMMARY, [{"stage": r.label, **c.as_dict()} for r in runs for c in r.changes]))
    return _finish(f"pipeline {pipe.name} ({stages}) in {spipe.output_dir}", runs, outcome, not_tested, t0,
                   summaries, spipe.output_dir / SUMMARY, config)


def _key(root: Path) -> str:
    from rlft.smoke.interrupt import run_key

    return run_key(root)


def _finished(root: Path) -> bool:
    from rlft.monitor.summary import read_summary

    return (read_summary(root / run_files.SUMMARY) or {}).get("status") == "finished"
