"""Whether each stage of a pipeline helped: its eval reward at the start and the end, warnings where a stage
ends below where it started or below where the stage before it ended, and the table `pipeline run` prints.
Pure functions over pipeline_summary.json's stage records."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rlft.numeric import is_finite


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    """A finite number, else None (a damaged file's string, list or bool is no number)."""
    if is_finite(value):
        return value
    return None


def _kind(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", float: "a number", int: "a number"}
    return kinds.get(type(value), type(value).__name__)


def summary_fields(summary: dict, path: Path | str) -> tuple[dict, list[str]]:
    """What a stage record takes from the stage's summary.json (status, wall_s, steps, eval, exit_code), each of the
    type the table reads, and one line per field that was not (left out, naming the file): a damaged or hand-edited
    summary never stops `pipeline run --resume` or the table."""
    problems: list[str] = []

    def bad(key: str, value: Any, want: str) -> None:
        problems.append(f"{path}: `{key}` is {_kind(value)}, not {want}; left out")

    out: dict[str, Any] = {"status": summary.get("status", "unknown"), "wall_s": summary.get("wall_s"),
                           "steps": summary.get("steps"), "eval": summary.get("eval", {}),
                           "exit_code": summary.get("exit_code")}
    if not isinstance(out["status"], str):
        bad("status", out["status"], "a word")
        out["status"] = "unknown"
    for key, integer in (("wall_s", False), ("steps", True), ("exit_code", True)):
        value = out[key]
        if value is not None and (_number(value) is None or (integer and not isinstance(value, int))):
            bad(key, value, "an integer" if integer else "a number")
            out[key] = None
    ev = out["eval"]
    if ev is None:
        out["eval"] = {}
    elif not isinstance(ev, dict):
        bad("eval", ev, "an object of eval numbers")
        out["eval"] = {}
    else:
        ev = dict(ev)
        for part in ("start", "end"):
            block = ev.get(part)
            if block is None:
                continue
            if not isinstance(block, dict):
                bad(f"eval.{part}", block, "an object")
                del ev[part]
                continue
            block = dict(block)
            for key in ("reward_mean", "preference_accuracy"):
                if block.get(key) is not None and _number(block[key]) is None:
                    bad(f"eval.{part}.{key}", block[key], "a number")
                    del block[key]
            ev[part] = block
        out["eval"] = ev
    return out, problems


def eval_numbers(record: dict) -> tuple[float | None, float | None]:
    """(eval start, eval end) mean reward of a stage record (None where the stage measured none, or where what it
    holds is not a number)."""
    ev = _mapping(record.get("eval"))
    return (_number(_mapping(ev.get("start")).get("reward_mean")),
            _number(_mapping(ev.get("end")).get("reward_mean")))


def standard_error(record: dict, part: str) -> float:
    """The standard error of a stage's eval mean (`part`: start or end) over its prompts: the std over prompts of
    each prompt's mean / sqrt(prompts); 0 when the eval did not record them (every drop then counts)."""
    block = _mapping(_mapping(record.get("eval")).get(part))
    std, prompts = _number(block.get("prompt_std")), _number(block.get("prompts"))
    return std / math.sqrt(prompts) if std is not None and prompts and prompts > 0 else 0.0


def fell(before: float, after: float, se_before: float, se_after: float) -> bool:
    """A drop beyond sampling noise: more than two standard errors of the difference of the two means (any drop
    when neither records its spread). A stage that starts where the last one ended at 0.97 and ends at 0.965 on 16
    prompts has not regressed."""
    return before - after > 2.0 * math.hypot(se_before, se_after)


def _eval_set(record: dict) -> str | None:
    found = _mapping(_mapping(record.get("eval")).get("end")).get("eval_set")
    return found if isinstance(found, str) else None


def _sampling(record: dict) -> dict | None:
    found = _mapping(_mapping(record.get("eval")).get("end")).get("sampling")
    return found if isinstance(found, dict) else None


def _label(record: dict) -> str:
    return str(record.get("name") or record.get("stage"))


def not_comparable(previous: dict, record: dict) -> str | None:
    """Why two stages' eval numbers do not compare (None when they do, or when either has no digest): their
    sampling settings in words when those differ, else that their prompts or rewards differ."""
    from rlft.config.eval_sampling import describe, sampling_difference

    a, b = _eval_set(previous), _eval_set(record)
    if a is None or b is None or a == b:
        return None
    before, here = _sampling(previous), _sampling(record)
    if before is not None and here is not None and sampling_difference(before, here):
        keys = ", ".join(f"eval.{k}" for k in sampling_difference(before, here))
        return (f"stage {_label(previous)} evaluates {describe(before)}; stage {_label(record)} {describe(here)}: "
                f"not comparable (they differ in {keys}; set `eval:` once in the pipeline's defaults)")
    return (f"stage {_label(previous)} and stage {_label(record)} evaluate different prompts or rewards: "
            f"not comparable")


def stage_warnings(records: list[dict]) -> list[list[str]]:
    """One list of warnings per record, in order. A stage ends below its own start, or below the previous
    stage's end when both measured the same prompts with the same rewards and sampling settings; when they did not,
    the warning says so and names the difference instead of comparing."""
    out: list[list[str]] = []
    previous: dict | None = None
    for record in records:
        start, end = eval_numbers(record)
        warnings = []
        if start is not None and end is not None and fell(start, end, standard_error(record, "start"),
                                                          standard_error(record, "end")):
            warnings.append(f"eval reward fell within the stage: {start:.4g} at the start, {end:.4g} at the end")
        if previous is not None and end is not None:
            before = eval_numbers(previous)[1]
            differs = not_comparable(previous, record)
            if differs is not None:
                warnings.append(differs)
            if before is not None and differs is None and fell(before, end, standard_error(previous, "end"),
                                                               standard_error(record, "end")):
                warnings.append(f"eval reward ended below the stage before: {end:.4g} here, {before:.4g} at the end "
                                f"of {previous.get('name') or previous.get('stage')}")
        out.append(warnings)
        if end is not None:
            previous = record  # a stage with no eval does not break the chain of comparisons
    return out


def with_evals(records: list[dict]) -> list[dict]:
    """The records with `eval_start`, `eval_end` (mean reward) and `warnings` filled in."""
    rows = []
    for record, warnings in zip(records, stage_warnings(records)):
        start, end = eval_numbers(record)
        damaged = [str(p) for p in record.get("damaged") or []]  # what the stage's summary.json held wrongly
        rows.append({**record, "eval_start": start, "eval_end": end, "warnings": damaged + warnings})
    return rows


def _num(x) -> str:
    x = _number(x)
    return "-" if x is None else f"{x:.4g}"


def format_table(records: list[dict]) -> str:
    """Stage by stage: number, name, stage, status, steps, eval start -> end; each warning on a line below."""
    header = ("#", "name", "stage", "status", "steps", "eval reward (start -> end)")
    lines = []
    for r in with_evals(records):
        start, end = r["eval_start"], r["eval_end"]
        change = "-" if start is None and end is None else f"{_num(start)} -> {_num(end)}"
        accuracy = _number(_mapping(_mapping(r.get("eval")).get("end")).get("preference_accuracy"))
        if accuracy is not None:
            change += f" (held-out pair accuracy {accuracy:.3g})"
        lines.append(((str(r.get("index", "")), str(r.get("name", "")), str(r.get("stage", "")),
                       str(r.get("status", "")), _num(r.get("steps")), change), r["warnings"]))
    widths = [max(len(row[i]) for row in [header, *(cells for cells, _ in lines)]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    for cells, warnings in lines:
        out.append("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
        out.extend(f"    warning: {w}" for w in warnings)
    return "\n".join(out)
