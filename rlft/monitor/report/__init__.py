"""`rlft report`: an offline HTML report of one or more run folders (reward graphs with health
events, reward logs, a completions browser, top/bottom completions) plus one PNG per graph.

It reads only the files a run leaves (metrics.jsonl, completions.jsonl, health.jsonl,
reward_logs.jsonl, summary.json), never trainer state, and imports no torch."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rlft.monitor.report.load import MAX_TEXT_CHARS, ReportInputError, RunData, load_run, unique_names

__all__ = ["ReportInputError", "ReportResult", "build_report", "load_run"]


@dataclass
class ReportResult:
    index: Path
    graphs: int
    completions: int
    bytes: int
    seconds: float
    note: str = ""


REPORT_KIND = "report"


def _claim_out(out: Path, default: bool, force: bool) -> bool:
    """May the report be written to `out`? True when the folder is rlft's own (its old graphs may go)."""
    from rlft.folders import FolderRefused, claim_output, made_by_rlft
    from rlft.run import is_run_folder

    # report/ inside an rlft run is rlft's, also when an older rlft wrote it without a marker
    made_before = (lambda folder: is_run_folder(folder.parent)) if default else None
    try:
        claim_output(out, REPORT_KIND, force=force, made_before=made_before)
    except FolderRefused as exc:
        raise ReportInputError(str(exc)) from None
    return made_by_rlft(out, REPORT_KIND) or (made_before is not None and made_before(out))


def build_report(paths: list, out_dir: Path | None = None, max_chars: int = MAX_TEXT_CHARS,
                 force: bool = False) -> ReportResult:
    """Write `<out_dir>/index.html` and `<out_dir>/graphs/*.png` for the runs at `paths` (overlaid).
    Default out_dir: `report/` in the first run's folder. A user-named folder must be new, empty or a
    report rlft wrote before (`force`: write into it anyway, replacing only index.html and graphs/*.png
    of the same names)."""
    from rlft.monitor.report.graphs import plan_graphs, render
    from rlft.monitor.report.html import build_html

    t0 = time.perf_counter()
    paths = [Path(p) for p in paths]
    if not paths:
        raise ReportInputError("give at least one run folder")
    runs: list[RunData] = [load_run(p, name, max_chars) for p, name in zip(paths, unique_names(paths))]
    if out_dir is not None:
        out = Path(out_dir)
    else:  # beside a jsonl of completion rows: rewards_try.jsonl -> rewards_try-report/
        out = paths[0] / "report" if paths[0].is_dir() else paths[0].with_name(f"{paths[0].stem}-report")
    ours = _claim_out(out, out_dir is None, force)
    graphs = plan_graphs(runs)
    note = ""
    try:
        render(graphs, runs)
    except ImportError:  # the page still has completions and logs; say how to get the graphs
        note = "matplotlib is not installed: no graphs (pip install matplotlib)"
        graphs = []
    # rows of the wrong shape are skipped, never guessed at: say how many of which file
    note = "; ".join([*([note] if note else []), *(f"{r.name}: {p}" for r in runs for p in r.problems)])
    img_dir = out / "graphs"
    img_dir.mkdir(exist_ok=True)
    if ours:  # graphs of an earlier report that this one no longer draws; never in a user's own folder
        for old in img_dir.glob("*.png"):
            old.unlink()
    for g in graphs:
        if g.png:
            (img_dir / f"{g.slug}.png").write_bytes(g.png)
    page = build_html(runs, graphs, "graphs")
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    n = sum(len(r.completions) for r in runs if r.completions)
    return ReportResult(index=index, graphs=sum(1 for g in graphs if g.png), completions=n,
                        bytes=index.stat().st_size, seconds=time.perf_counter() - t0, note=note)
