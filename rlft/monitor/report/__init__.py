"""`rlft report`: an offline HTML report of one or more run folders (reward graphs with health
events, reward logs, a completions browser, top/bottom completions) plus one PNG per graph.

It reads only the files a run leaves (metrics.jsonl, completions.jsonl, health.jsonl,
reward_logs.jsonl, summary.json), never trainer state, and imports no torch."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rlft import run_files
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


def report_owned(out: Path, in_run: bool):
    """What a report folder may hold (rlft.rundir.markers.Owned): index.html and graphs/ with, in a folder the user
    named, only the PNGs the marker says the last report drew; in report/ of a run folder (the default place,
    also written by older rlft without that list), any PNG."""
    import re

    from rlft.rundir.markers import Owned, read_marker

    drawn = (read_marker(out) or {}).get("graphs")
    if in_run or not isinstance(drawn, list):
        pngs = (r"[^/]+\.png",) if in_run else ()
    else:
        pngs = tuple(re.escape(n) for n in drawn if isinstance(n, str) and n.endswith(".png") and "/" not in n)
    return Owned(files=("index.html",), subdirs={"graphs": Owned(files=pngs)})


def _claim_out(out: Path, default: bool, force: bool) -> bool:
    """May the report be written to `out`? True when the folder is rlft's own and holds only what an
    earlier report wrote there (those files may go); False for a new folder or a user's one with `force`."""
    from rlft.rundir.markers import FolderRefused, claim_output, made_by_rlft
    from rlft.rundir.folder import is_run_folder

    # report/ inside an rlft run is rlft's, also when an older rlft wrote it without a marker
    made_before = (lambda folder: is_run_folder(folder.parent)) if default else None
    owned = report_owned(out, default)
    existed = out.is_dir() and not out.is_symlink() and any(out.iterdir())
    try:
        claim_output(out, REPORT_KIND, force=force, made_before=made_before, owned=owned)
    except FolderRefused as exc:
        raise ReportInputError(str(exc)) from None
    if not existed:
        return made_by_rlft(out, REPORT_KIND)
    ours = made_by_rlft(out, REPORT_KIND) or (made_before is not None and made_before(out))
    return ours and owned.first_foreign(out) is None


def pipeline_graph(runs: list[RunData]):
    """The pipeline's eval curve across its stages as a report graph (section Pipeline)."""
    from rlft.monitor.report.graphs import Graph
    from rlft.monitor.report.pipeline import comparable, render_curve, stage_curves

    curves = stage_curves(runs)
    why = "each stage's eval reward (start, during training, end) after the steps of the stages before it; dashed " \
          "lines mark the stage boundaries"
    if not comparable(curves):
        why += "; the stages evaluate differently (prompts, rewards or `eval:` settings): their levels do not compare"
    return Graph("pipeline_eval", "eval reward across the pipeline", "Pipeline", ["eval_reward"],
                 ["eval_reward"], why, render_curve(curves))


def arrange_comparison(graphs: list, runs: list[RunData], compare: bool) -> None:
    """Add the eval curve with its spread where an eval logged one; for a side-by-side of runs, move the curves
    every run logged (reward, eval reward, KL, loss) and that eval curve to the Comparison section, first."""
    from rlft.monitor.report.compare import eval_spread_graph, has_spread, shared_keys

    if has_spread(runs):
        graphs.append(eval_spread_graph(runs, "Comparison" if compare else "Evaluation"))
    if compare:
        shared = shared_keys(runs)
        for g in graphs:
            if g.series and g.series[0] in shared:
                g.section = "Comparison"


def build_report(paths: list, out_dir: Path | None = None, max_chars: int = MAX_TEXT_CHARS,
                 force: bool = False) -> ReportResult:
    """Write `<out_dir>/index.html` and `<out_dir>/graphs/*.png` for the runs at `paths` (overlaid).
    Default out_dir: `report/` in the first run's folder. A user-named folder must be new, empty or a
    report rlft wrote before (`force`: write into it anyway, replacing only index.html and graphs/*.png
    of the same names)."""
    from rlft.rundir.markers import read_marker, write_marker
    from rlft.monitor.report.graphs import plan_graphs, render
    from rlft.monitor.report.html import build_html

    from rlft.monitor.report.pipeline import is_pipeline_folder, stage_folders

    t0 = time.perf_counter()
    paths = [Path(p) for p in paths]
    if not paths:
        raise ReportInputError("give at least one run folder")
    pipeline = len(paths) == 1 and is_pipeline_folder(paths[0])  # its stages' runs, one eval curve across them
    if pipeline:
        labels, stage_dirs = zip(*stage_folders(paths[0]))
        runs: list[RunData] = [load_run(p, name, max_chars) for p, name in zip(stage_dirs, labels)]
    else:
        runs = [load_run(p, name, max_chars) for p, name in zip(paths, unique_names(paths))]
    if out_dir is not None:
        out = Path(out_dir)
    else:  # beside a jsonl of completion rows: rewards_try.jsonl -> rewards_try-report/
        out = paths[0] / run_files.REPORT if paths[0].is_dir() else paths[0].with_name(f"{paths[0].stem}-report")
    ours = _claim_out(out, out_dir is None and not pipeline, force)
    graphs = plan_graphs(runs)
    note = ""
    try:
        render(graphs, runs)
        if pipeline:
            graphs.insert(0, pipeline_graph(runs))
        compare = len(runs) > 1 and not pipeline
        arrange_comparison(graphs, runs, compare)
    except ImportError:  # the page still has completions and logs; say how to get the graphs
        note = "matplotlib is not installed: no graphs (pip install matplotlib)"
        graphs = []
    # rows of the wrong shape are skipped, never guessed at: say how many of which file
    note = "; ".join([*([note] if note else []), *(f"{r.name}: {p}" for r in runs for p in r.problems)])
    img_dir = out / "graphs"
    index = out / "index.html"
    for path in (img_dir, index):  # a forced user folder: never write through a link planted there
        if path.is_symlink():
            raise ReportInputError(f"{path} is a symbolic link; rlft does not write through links: remove it")
    img_dir.mkdir(exist_ok=True)
    if ours:  # graphs of an earlier report (checked above: nothing else is there); never in a user's own folder
        for old in img_dir.glob("*.png"):
            old.unlink()
    drawn = []
    for g in graphs:
        if g.png:
            (img_dir / f"{g.slug}.png").write_bytes(g.png)
            drawn.append(f"{g.slug}.png")
    page = build_html(runs, graphs, "graphs", compare=len(runs) > 1 and not pipeline)
    index.write_text(page, encoding="utf-8")
    marker = read_marker(out)
    if marker is not None and marker["kind"] == REPORT_KIND:  # what the next report may replace here
        write_marker(out, {**marker, "graphs": sorted(drawn)})
    n = sum(len(r.completions) for r in runs if r.completions)
    return ReportResult(index=index, graphs=sum(1 for g in graphs if g.png), completions=n,
                        bytes=index.stat().st_size, seconds=time.perf_counter() - t0, note=note)
