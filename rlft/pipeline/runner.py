"""Run a pipeline: its stages in order in this process, each from the run before it, resumable as a
whole. Finished stages are skipped on `--resume` (their folders are not touched), an interrupted one
continues from its checkpoint, and `pipeline_summary.json` at the root says how far each got."""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

from rlft import progress as shown
from rlft.config.errors import ConfigError
from rlft.pipeline.spec import Pipeline, StageEntry, compose_stage, split_overrides, starts_next
from rlft import run_files

SUMMARY = run_files.PIPELINE_SUMMARY


def stage_finished(run_dir: Path) -> bool:
    """A stage counts as done when its summary says finished and its final model is in place."""
    from rlft.config.init_from import is_finished
    from rlft.monitor.summary import read_summary

    summary = read_summary(run_dir / run_files.SUMMARY)
    return summary is not None and summary.get("status") == "finished" and is_finished(run_dir)


def _resumable(run_dir: Path) -> bool:
    """Whether a stage folder holds progress worth resuming (a complete checkpoint or sampled rows)."""
    from rlft.rundir.folder import RunDir

    return bool(RunDir(run_dir).complete_checkpoints()) or (run_dir / run_files.SAMPLES).is_file()


def _stage_record(pipe: Pipeline, entry: StageEntry, status: str | None = None) -> dict:
    run_dir = pipe.stage_dir(entry)
    record = {"index": entry.index, "name": entry.name, "stage": entry.stage, "dir": str(run_dir),
              "status": status or "pending"}
    from rlft.monitor.summary import read_summary
    from rlft.pipeline.table import summary_fields

    summary = read_summary(run_dir / run_files.SUMMARY)
    if summary is None:
        return record
    fields, damaged = summary_fields(summary, run_dir / run_files.SUMMARY)  # wrong-typed fields named and left out
    record.update(fields, status=status or fields["status"])
    if damaged:
        record["damaged"] = damaged
    return record


def write_pipeline_summary(pipe: Pipeline, records: dict[int, dict], status: str) -> None:
    from rlft.pipeline.table import with_evals

    rows = with_evals([records.get(e.index) or _stage_record(pipe, e) for e in pipe.stages])
    data = {"pipeline": pipe.name, "file": str(pipe.path), "status": status, "stages": rows}
    tmp = pipe.output_dir / (SUMMARY + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(pipe.output_dir / SUMMARY)


def print_table(pipe: Pipeline, records: dict[int, dict]) -> None:
    """Stage by stage, whether it helped: status, steps, eval reward start -> end, and the warnings (on stderr,
    with the pipeline's other lines: stdout stays for what wraps a pipeline, e.g. --smoke's verdict)."""
    from rlft.pipeline.table import format_table

    print(format_table([records.get(e.index) or _stage_record(pipe, e) for e in pipe.stages]), file=sys.stderr,
          flush=True)


PIPELINE_KIND = "pipeline"


def _claim_pipeline_dir(pipe: Pipeline) -> None:
    """The pipeline root: new, empty, or one a pipeline run made (its marker, or an older rlft's summary)."""
    from rlft.rundir.markers import FolderRefused, claim_output
    from rlft.errors import RunError

    try:
        claim_output(pipe.output_dir, PIPELINE_KIND, what="pipeline folder",
                     fix="set `output_dir:` in the pipeline file to a new or empty folder",
                     made_before=lambda folder: (folder / SUMMARY).is_file())
    except FolderRefused as exc:
        raise RunError(str(exc)) from None


def run_pipeline(pipe: Pipeline, overrides: list[str], hw_default: str, resume: bool, verbose: bool,
                 stage_layers: dict | None = None) -> int:
    """`stage_layers`: {stage index: config layers applied last} (`--smoke`'s changes)."""
    from rlft.config import validate
    from rlft.errors import RunError
    from rlft.rundir.options import RunOptions
    from rlft.stages import get_runner

    common, own, problems = split_overrides(pipe, overrides)
    if problems:
        raise ConfigError(problems)
    started = [e for e in pipe.stages if pipe.stage_dir(e).exists() and any(pipe.stage_dir(e).iterdir())]
    if started and not resume:
        raise RunError(f"pipeline folder {pipe.output_dir} already holds {started[0].folder}: pass --resume to "
                       "continue "
                       f"the pipeline, or set `output_dir:` (or remove the folder) to start again")
    _claim_pipeline_dir(pipe)
    resume_cmd = f"rlft pipeline run {pipe.path} --resume"
    records: dict[int, dict] = {}
    previous: Path | None = None
    for entry in pipe.stages:
        run_dir = pipe.stage_dir(entry)
        if resume and stage_finished(run_dir):
            print(f"rlft pipeline: {entry.label} finished earlier ({run_dir}), skipped", file=sys.stderr)
            records[entry.index] = _stage_record(pipe, entry)
            previous = run_dir if starts_next(entry) else previous
            continue
        composed = compose_stage(pipe, entry, common, own.get(entry.index, []), hw_default, previous,
                                 tuple((stage_layers or {}).get(entry.index, ())))
        try:
            cfg, warnings = validate(composed, for_train=True)
        except ConfigError as exc:
            raise ConfigError([p.for_stage(entry.label) for p in exc.problems]) from None
        for w in warnings:
            print(f"{entry.label}: {w}", file=sys.stderr)
        again = resume and run_dir.exists() and _resumable(run_dir)
        opts = RunOptions(resume=again, overwrite=run_dir.exists() and not again, verbose=verbose,
                          resume_hint=resume_cmd)
        print(f"rlft pipeline: {entry.label}: {'resuming' if again else 'starting'} {entry.stage} in {run_dir}"
              + (f", from {previous}" if cfg.model.init_from else ""), file=sys.stderr)
        t0 = time.monotonic()
        try:  # the stage's own progress (its evals, sampling) is labelled with the stage
            with shown.phase(f"{entry.label} of {len(pipe.stages)}"):
                code = get_runner(entry.stage)(cfg, composed, opts) or 0
        except RunError as exc:
            print(f"rlft pipeline: {entry.label}: error: {exc}", file=sys.stderr)
            code = exc.exit_code
        gc.collect()  # the stage's models are garbage now; free them before the next loads its own
        records[entry.index] = _stage_record(pipe, entry)
        records[entry.index].setdefault("wall_s", round(time.monotonic() - t0, 3))
        if code != 0:
            write_pipeline_summary(pipe, records, "interrupted" if code >= 128 else "failed")
            print_table(pipe, records)
            print(f"rlft pipeline: stopped in {entry.label} (exit {code}); continue with "
                  f"`{resume_cmd}`", file=sys.stderr)
            return code
        write_pipeline_summary(pipe, records, "running")
        previous = run_dir if starts_next(entry) else previous
    write_pipeline_summary(pipe, records, "finished")
    print_table(pipe, records)
    print(f"rlft pipeline: {len(pipe.stages)} stages finished; summary in {pipe.output_dir / SUMMARY}", file=sys.stderr)
    return 0
