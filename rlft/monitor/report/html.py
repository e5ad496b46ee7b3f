"""The report page: one self-contained HTML file (CSS, script, data and graph images inline; no
network fetch of any kind), so it can be mailed, archived or opened from a laptop offline."""

from __future__ import annotations

import base64
import html
import json
import math
import time
from importlib import resources

from rlft.monitor.report.graphs import SECTIONS, health_marks, version_changes
from rlft.monitor.report.load import RunData

MAX_LOG_CHARS = 4000


def _asset(name: str) -> str:
    return resources.files("rlft.monitor.report").joinpath(name).read_text(encoding="utf-8")


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def compress_steps(steps: list) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1-3, 7, 9-10'."""
    out, run = [], []
    for s in sorted(set(steps)):
        if run and s == run[-1] + 1:
            run.append(s)
        else:
            if run:
                out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = [s]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _round(x, nd=5):
    return None if x is None else (round(x, nd) if isinstance(x, float) else x)


def completions_data(run: RunData) -> dict | None:
    c = run.completions
    if c is None or len(c) == 0:
        return None
    extra_cols: list = []
    for p in c.prompts:
        for k in p.extra:
            if k not in extra_cols:
                extra_cols.append(k)
    return {
        "rewardNames": c.reward_names, "lengthUnit": c.length_unit, "truncated": c.truncated, "extraCols": extra_cols,
        "prompts": [{"id": p.key if isinstance(p.key, (int, float)) else p.index, "text": p.text, "len": p.length,
                     "extra": p.extra, "steps": compress_steps(p.steps), "n": p.count} for p in c.prompts],
        "p": c.prompt, "s": c.step, "t": c.text, "r": [[_round(x) for x in col] for col in c.scores],
        "tot": [_round(x) for x in c.total], "len": c.length,
        "pc": {k: [_round(v) if isinstance(v, float) else v for v in vals] for k, vals in c.per_completion.items()},
    }


def _no_completions_reason(run: RunData) -> str:
    from rlft.config.stages import SPECS

    spec = SPECS.get(run.stage) if isinstance(run.stage, str) else None
    if spec is not None and spec.report_note:  # a stage that samples nothing says so
        return spec.report_note
    return (f"this {run.stage} run wrote no completions.jsonl (monitor.log_completions may be 0, or the run "
            f"stopped before its first step)")


def log_rows(run: RunData) -> list[dict]:
    out = []
    for r in run.reward_logs:
        text = str(r.get("output") or "")
        err = str(r.get("error") or "")
        out.append({"step": r.get("step", 0), "reward": str(r.get("reward", "?")), "calls": r.get("calls"),
                    "ms": _round(r.get("ms"), 2), "errors": r.get("errors") or 0,
                    "output": text[:MAX_LOG_CHARS] + ("…" if len(text) > MAX_LOG_CHARS else ""),
                    "error": err[:MAX_LOG_CHARS]})
    return out


def log_stats(run: RunData) -> list[dict]:
    """Per reward function: calls, mean and p95 of the per-call time (ms), errors, rows with output."""
    by: dict = {}
    for r in run.reward_logs:
        s = by.setdefault(str(r.get("reward", "?")), {"calls": 0, "ms": [], "errors": 0, "output": 0})
        calls = r.get("calls") or 1
        s["calls"] += calls
        if isinstance(r.get("ms"), (int, float)):
            s["ms"].append(float(r["ms"]))
        s["errors"] += r.get("errors") or 0
        s["output"] += bool(r.get("output"))
    out = []
    for name, s in sorted(by.items()):
        ms = sorted(s["ms"])
        p95 = ms[min(len(ms) - 1, math.ceil(0.95 * len(ms)) - 1)] if ms else None
        out.append({"reward": name, "calls": s["calls"], "ms_mean": sum(ms) / len(ms) if ms else None,
                    "ms_p95": p95, "errors": s["errors"], "rows_with_output": s["output"]})
    return out


def _fmt(x) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _summary_rows(runs: list[RunData]) -> str:
    rows = []
    for run in runs:
        s = run.summary
        steps = s.get("steps", run.metrics[-1].get("step") if run.metrics else None)
        wall = s.get("wall_s")
        rew = s.get("headline") or s.get("reward") or {}
        best = s.get("best_checkpoint") or {}
        ev = s.get("eval") or {}
        ev_txt = " → ".join(_fmt((ev.get(k) or {}).get("reward_mean")) for k in ("start", "end")) if ev else "–"
        rows.append(
            f"<tr><td>{_e(run.name)}</td><td>{_e(run.stage)}</td><td>{_e(s.get('status', 'running or unknown'))}</td>"
            f"<td class=num>{_e(_fmt(steps))}</td><td class=num>{_e(_fmt(wall))}</td>"
            f"<td>{_e(rew.get('metric', 'reward' if rew else '–'))}</td>"
            f"<td class=num>{_e(_fmt(rew.get('first_mean')))}</td><td class=num>{_e(_fmt(rew.get('last_mean')))}</td>"
            f"<td class=num>{_e(ev_txt)}</td><td>{_e(best.get('path', '–'))}</td>"
            f"<td class=num>{len(run.completions) if run.completions else 0}</td>"
            f"<td class=num>{sum(1 for e in run.health if e.get('level') in ('warning', 'critical'))}</td></tr>")
    return ("<table><thead><tr><th>run</th><th>stage</th><th>status</th><th class=num>steps</th>"
            "<th class=num>wall (s)</th><th>headline</th><th class=num>first</th><th class=num>last</th>"
            "<th class=num>eval reward start → end</th><th>best checkpoint</th><th class=num>completions</th>"
            "<th class=num>health events</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _comparison_html(runs: list[RunData]) -> str:
    """The side-by-side of several runs: final numbers in one table, then the config keys whose values differ."""
    from rlft.monitor.report.compare import config_diff, final_numbers

    finals = [final_numbers(r) for r in runs]
    head = "".join(f"<th class=num>{_e(r.name)}</th>" for r in runs)

    def row(label, cells):
        return f"<tr><td>{_e(label)}</td>" + "".join(f"<td class=num>{_e(c)}</td>" for c in cells) + "</tr>"

    def pm(f):
        return "–" if f["eval_end"] is None else _fmt(f["eval_end"]) + (
            f" ± {_fmt(f['eval_end_std'])}" if f["eval_end_std"] is not None else "")

    rows = [row("steps", [_fmt(f["steps"]) for f in finals]),
            row("last training reward", [_fmt(f["reward"]) for f in finals]),
            row("eval reward start", [_fmt(f["eval_start"]) for f in finals]),
            row("eval reward end (mean ± std over prompts)", [pm(f) for f in finals]),
            row("eval pass@k at the end", [_fmt(f["eval_end_pass"]) + (f" (k={f['k']})" if f["k"] else "")
                                           if f["eval_end_pass"] is not None else "–" for f in finals]),
            row("last KL to the reference", [_fmt(f["kl_policy_ref"]) for f in finals]),
            row("last loss", [_fmt(f["loss"]) for f in finals])]
    diff = config_diff(runs)
    if diff:
        diff_rows = "".join(row(k, [_fmt(v) if not isinstance(v, (list, dict)) else json.dumps(v) for v in vals])
                            for k, vals in diff)
        diff_html = (f"<table id=config-diff><thead><tr><th>config key</th>{head}</tr></thead><tbody>{diff_rows}"
                     "</tbody></table>")
    else:
        diff_html = ("<p class=muted id=config-diff>The runs' config.yaml files set every key alike (or one is "
                     "missing).</p>")
    return ("<h2 id=comparison>Side by side</h2><h3>Final numbers</h3><table id=final-numbers><thead><tr><th></th>"
            f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            f"<h3>Config keys that differ ({len(diff)})</h3>{diff_html}"
            "<p class=muted>The curves every run logged are overlaid first, under Comparison.</p>")


def _health_tables(runs: list[RunData]) -> str:
    parts = []
    for run in runs:
        if not run.health:
            continue
        rows = []
        for e in run.health[:2000]:
            kind = "rollback" if e.get("rule") == "rollback" else e.get("level", "")
            rows.append(f"<tr><td class=num>{_e(e.get('step'))}</td><td><span class='badge "
                        f"{_e(kind)}'>{_e(kind)}</span></td>"
                        f"<td>{_e(e.get('rule', ''))}</td><td>{_e(e.get('metric', ''))}</td>"
                        f"<td class=num>{_e(_fmt(e.get('value')))}</td><td>{_e(e.get('action', ''))}</td>"
                        f"<td>{_e(e.get('message', e.get('source', '')))}</td></tr>")
        more = f" (first 2000 of {len(run.health)})" if len(run.health) > 2000 else ""
        marks = health_marks(run)
        counts = ", ".join(f"{len(v)} step(s) with {k}" for k, v in marks.items() if v)
        parts.append(f"<details><summary>{_e(run.name)}: {len(run.health)} health events{more}; {_e(counts)}</summary>"
                     "<div class=scroll><table><thead><tr><th "
                     "class=num>step</th><th>level</th><th>rule</th><th>metric</th>"
                     "<th class=num>value</th><th>action</th><th>message</th></tr></thead><tbody>"
                     + "".join(rows) + "</tbody></table></div></details>")
    return "".join(parts) or "<p class=muted>No health events.</p>"


def _graphs_html(graphs, image_dir: str | None) -> str:
    parts = []
    for section in SECTIONS:
        members = [g for g in graphs if g.section == section and g.png]
        if not members:
            continue
        title = "Stage-specific" if section == "Stage" else section
        parts.append(f"<h2>{_e(title)}</h2><div class=graphs>")
        for g in members:
            src = "data:image/png;base64," + base64.b64encode(g.png).decode()
            parts.append(f"<figure id='graph-{_e(g.slug)}'><img alt='{_e(g.title)}' src='{src}'>"
                         f"<figcaption>{_e(g.help)}{' · ' if g.help else ''}{_e(', '.join(g.series))}"
                         + (f" · <span class=muted>{_e(image_dir)}/{_e(g.slug)}.png</span>" if image_dir else "")
                         + "</figcaption></figure>")
        parts.append("</div>")
    return "".join(parts)


def _log_stats_html(runs: list[RunData]) -> str:
    parts = []
    for run in runs:
        stats = log_stats(run)
        if not stats:
            continue
        rows = "".join(f"<tr><td>{_e(s['reward'])}</td><td class=num>{s['calls']}</td>"
                       f"<td class=num>{_e(_fmt(s['ms_mean']))}</td><td class=num>{_e(_fmt(s['ms_p95']))}</td>"
                       f"<td class='num{' bad' if s['errors'] else ''}'>{s['errors']}</td>"
                       f"<td class=num>{s['rows_with_output']}</td></tr>" for s in stats)
        parts.append(f"<h3>{_e(run.name)}</h3><table><thead><tr><th>reward function</th><th class=num>calls</th>"
                     "<th class=num>mean ms / call</th><th class=num>p95 ms / call</th><th class=num>errors</th>"
                     f"<th class=num>steps with output</th></tr></thead><tbody>{rows}</tbody></table>")
    return "".join(parts)


def _payload(runs: list[RunData]) -> str:
    """The runs' completions, reward logs and reward-version changes as the JSON the page's script reads."""
    data = {"runs": []}
    for run in runs:
        comp = completions_data(run)
        data["runs"].append({"name": run.name, "stage": run.stage, "completions": comp, "samplesOnly": run.samples_only,
                             "noCompletions": None if comp else _no_completions_reason(run),
                             "rewardLogs": log_rows(run), "versions": version_changes(run.metrics)})
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return payload.replace("<", "\\u003c")  # no `</script>` or `<!--` can end the data block early


def _notes(runs: list[RunData]) -> tuple[str, str, str]:
    """The page's notes: runs without reward logs, reward functions changed mid-run, rows left out as malformed."""
    no_logs = [r.name for r in runs if not r.reward_logs]
    logs_note = (f"<p class=note>No reward logs captured for {_e(', '.join(no_logs))}: reward_logs.jsonl is written "
                 "by GRPO, RS-SFT and AWR runs while monitor.reward_logs is on (the default), one row per step and "
                 "reward "
                 "function.</p>" if no_logs else "")
    version_note = ""
    changes = [(r.name, version_changes(r.metrics)) for r in runs if version_changes(r.metrics)]
    if changes:
        version_note = "<p class=muted>Reward functions changed mid-run: " + "; ".join(
            f"{_e(n)} at step(s) {_e(', '.join(str(s) for s, _ in ch))}" for n, ch in changes) + " (dotted lines).</p>"
    skipped = [f"{r.name}: {p}" for r in runs for p in r.problems]
    skipped_note = (f"<p class=note>Left out as malformed: {_e('; '.join(skipped))}.</p>" if skipped else "")
    return logs_note, version_note, skipped_note


def build_html(runs: list[RunData], graphs, image_dir: str | None = "graphs", compare: bool = False) -> str:
    payload = _payload(runs)
    names = ", ".join(r.name for r in runs)
    logs_note, version_note, skipped_note = _notes(runs)
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>rlft report: {_e(names)}</title>
<style>{_asset("report.css")}</style></head>
<body>
<header><h1>rlft report: {_e(names)}</h1>
<div class=sub>generated {_e(generated)} · {len(graphs)} graphs · works offline</div>
<nav><button data-tab="graphs">Reward graphs</button><button data-tab="logs">Reward logs</button>
<button data-tab="completions">Completions</button><button data-tab="top">Top &amp; bottom</button></nav></header>
<main>
<section class=tab id="tab-graphs">
<h2>Runs</h2>{_summary_rows(runs)}{skipped_note}{_comparison_html(runs) if compare else ''}
<p class=muted>Markers on the x-axis: ▼ yellow = health warning, ▼ red = critical, ▲ purple = rollback.
Curves with many points show a faint raw line and its moving average.</p>{version_note}
{_graphs_html(graphs, image_dir) or "<p class=note>No numeric metrics logged yet.</p>"}
<h2>Health events</h2>{_health_tables(runs)}
</section>
<section class=tab id="tab-logs">
<h2>Reward logs</h2>{logs_note}{_log_stats_html(runs)}
<div id="logs-root">
<div class=controls><span id="logs-run-wrap">run <select id="logs-run"></select></span>
function <select id="logs-fn"></select> steps <input id="logs-from" type=number placeholder=from style="width:6em">
– <input id="logs-to" type=number placeholder=to style="width:6em">
<input id="logs-text" type=text placeholder="search output"> <label><input id="logs-errors" type=checkbox> errors only</label></div>
<div class=scroll style="max-height:640px"><table><thead><tr><th class=num>step</th><th>function</th><th class=num>calls</th>
<th class=num>ms / call</th><th class=num>errors</th><th>output</th></tr></thead><tbody id="logs-body"></tbody></table></div>
<div class=controls id="logs-pager"></div></div>
</section>
<section class=tab id="tab-completions">
<div id="completions-notes"></div>
<div id="completions-root">
<div class=controls><span id="cmp-run-wrap">run <select id="cmp-run"></select></span><span class=muted id="cmp-meta"></span></div>
<h2>Prompts</h2>
<div class=controls><input id="prompt-filter" type=text placeholder="filter prompts"><span class=muted id="prompt-count"></span></div>
<div class=scroll><table><thead id="prompt-head"></thead><tbody id="prompt-body"></tbody></table></div>
<h2>Compare completions</h2>
<pre class="text muted" id="cmp-prompt"></pre>
<div class=cmp><div class=side id="cmp-left"></div><div class=side id="cmp-right"></div></div>
<h2>All completions of this prompt</h2>
<div class=controls>step <input id="all-step" type=text placeholder="any" style="width:6em"><span id="all-pager"></span></div>
<div class=scroll style="max-height:640px"><table><thead id="all-head"></thead><tbody id="all-body"></tbody></table></div>
</div>
</section>
<section class=tab id="tab-top">
<div id="top-notes"></div>
<div id="top-root">
<p class=muted>The highest and lowest scored completions of the run: check that high scores really are good
answers (reward hacking shows up here first).</p>
<div class=controls><span id="top-run-wrap">run <select id="top-run"></select></span> rank by <select id="top-key"></select>
show <select id="top-n"><option>10</option><option selected>25</option><option>100</option></select></div>
<h2>Highest</h2><div class=scroll style="max-height:640px"><table id="top-high"></table></div>
<h2>Lowest</h2><div class=scroll style="max-height:640px"><table id="top-low"></table></div>
</div>
</section>
</main>
<script id="rlft-data" type="application/json">{payload}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""
