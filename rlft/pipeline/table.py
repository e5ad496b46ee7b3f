"""Whether each stage of a pipeline helped: its eval reward at the start and the end, warnings where a stage
ends below where it started or below where the stage before it ended, and the table `pipeline run` prints.
Pure functions over pipeline_summary.json's stage records."""

from __future__ import annotations


def eval_numbers(record: dict) -> tuple[float | None, float | None]:
    """(eval start, eval end) mean reward of a stage record (None where the stage measured none)."""
    ev = record.get("eval") or {}
    return (ev.get("start") or {}).get("reward_mean"), (ev.get("end") or {}).get("reward_mean")


def _eval_set(record: dict) -> str | None:
    return ((record.get("eval") or {}).get("end") or {}).get("eval_set")


def stage_warnings(records: list[dict]) -> list[list[str]]:
    """One list of warnings per record, in order. A stage ends below its own start, or below the previous
    stage's end when both measured the same prompts with the same rewards (different sets do not compare)."""
    out: list[list[str]] = []
    previous: dict | None = None
    for record in records:
        start, end = eval_numbers(record)
        warnings = []
        if start is not None and end is not None and end < start:
            warnings.append(f"eval reward fell within the stage: {start:.4g} at the start, {end:.4g} at the end")
        if previous is not None and end is not None:
            before = eval_numbers(previous)[1]
            same = _eval_set(previous) is None or _eval_set(record) is None or _eval_set(previous) == _eval_set(record)
            if before is not None and same and end < before:
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
        rows.append({**record, "eval_start": start, "eval_end": end, "warnings": warnings})
    return rows


def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def format_table(records: list[dict]) -> str:
    """Stage by stage: number, name, stage, status, steps, eval start -> end; each warning on a line below."""
    header = ("#", "name", "stage", "status", "steps", "eval reward (start -> end)")
    lines = []
    for r in with_evals(records):
        start, end = r["eval_start"], r["eval_end"]
        change = "-" if start is None and end is None else f"{_num(start)} -> {_num(end)}"
        accuracy = ((r.get("eval") or {}).get("end") or {}).get("preference_accuracy")
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
