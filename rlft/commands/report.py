"""`rlft report`: the offline HTML report of one or more runs."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rlft.commands.common import err, exits


RUNS_HELP = ("Run folder(s), or jsonl files of completion rows (as `rlft rewards try` writes); several are overlaid "
             "on the same graphs, with a side-by-side of their final numbers and the config keys that differ.")


def report(runs: List[Path] = typer.Argument(..., help=RUNS_HELP),
           out: Optional[Path] = typer.Option(None, "--out", "-o",
                                              help="Output folder: new, empty, or a report rlft wrote before "
                                                   "(default: report/ in the first run's folder)."),
           max_chars: int = typer.Option(4000, "--max-chars", min=100,
                                         help="Characters of each completion kept in the page (the jsonl keeps all)."),
           force: bool = typer.Option(False, "--force", help="Write into an -o folder that holds other files "
                                                             "(index.html and graphs/ are replaced).")) -> None:
    """Write an offline HTML report (reward graphs, reward logs, completions browser) and one PNG per graph."""
    from rlft.monitor.report import build_report

    with exits():
        res = build_report(runs, out, max_chars=max_chars, force=force)
    if res.note:
        err(f"rlft report: {res.note}")
    typer.echo(f"report written to {res.index} ({res.graphs} graphs in {res.index.parent / 'graphs'}, "
               f"{res.completions} completions, {res.bytes / 1e6:.1f} MB, {res.seconds:.1f} s)")
