"""End to end: a short GRPO demo run, its summary, `rlft report`, and the page opened in headless
Chromium: no console errors, every image loads, the completions comparison shows the first prompt,
no request leaves the machine. Screenshots are kept under $RLFT_TEST_ARTIFACTS (default test-artifacts/)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

import pytest

from cdp import Browser, find_chromium
from conftest import ROOT, run_cli
from rlft.monitor.report import load_run

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"
ARTIFACTS = Path(os.environ.get("RLFT_TEST_ARTIFACTS", ROOT / "test-artifacts"))
LOCAL_SCHEMES = {"file", "data", "about", "blob"}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("report-e2e")
    out = base / "run"
    chatty = base / "chatty.yaml"  # a weight-0 reward that prints, logs and fails once: the reward-logs tab
    chatty.write_text(f"rewards:\n  - fn: char_fraction\n  - fn: {ROOT / 'tests/fixtures/chatty_reward.py'}:chatty\n"
                      f"    weight: 0.0\n")
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, "-c", chatty, f"train.output_dir={out}",
                  "train.max_steps=6", "train.save_steps=3", "monitor.log_completions=-1",
                  "data.eval_prompts=0")  # no start/end evaluation: the chatty reward's calls are the steps'
    assert res.returncode == 0, res.stderr[-3000:]
    return out, res


def test_demo_run_ends_with_a_summary(demo_run):
    out, res = demo_run
    assert "rlft run summary" in res.stderr and f"rlft report {out}" in res.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["stage"] == "grpo" and s["status"] == "finished" and s["steps"] == 6 and s["wall_s"] > 0
    rewards = [json.loads(line)["reward"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert s["reward"]["first_mean"] == pytest.approx(sum(rewards[:3]) / 3)
    assert s["reward"]["last_mean"] == pytest.approx(sum(rewards[-3:]) / 3)
    assert Path(s["best_checkpoint"]["path"]).is_dir() and s["best_checkpoint"]["step"] in (3, 6)
    assert s["report_command"] == f"rlft report {out}"


def test_reward_output_is_captured_per_step(demo_run):
    out, res = demo_run
    assert "chatty call" not in res.stdout + res.stderr  # captured, not on the console
    rows = [json.loads(line) for line in (out / "reward_logs.jsonl").read_text().splitlines()]
    chatty = [r for r in rows if r["reward"] == "chatty"]
    assert [r["step"] for r in chatty] == list(range(1, 7))
    assert all(r["calls"] == 1 and r["ms"] >= 0 for r in chatty)
    assert "chatty call 1: scoring 16 completions" in chatty[0]["output"]
    assert "chatty stderr line" in chatty[0]["output"] and "[WARNING chatty] chatty warning 1" in chatty[0]["output"]
    assert chatty[2]["errors"] == 16 and "ValueError: chatty fails on call 3" in chatty[2]["error"]
    assert "Traceback" in chatty[2]["error"] and all(r["errors"] == 0 for r in chatty if r["step"] != 3)
    assert {r["reward"] for r in rows} == {"char_fraction", "chatty"}


def test_report_opens_in_headless_chromium(demo_run):
    pytest.importorskip("matplotlib", reason="the report's graphs need matplotlib (a dependency of rlft)")
    binary = find_chromium()
    if binary is None:
        pytest.skip("headless Chromium not found: install Debian's `chromium` package (.ci/run does) "
                    "or point RLFT_CHROMIUM at a Chromium binary")
    out, _ = demo_run
    res = run_cli("report", out)
    assert res.returncode == 0, res.stderr[-3000:]
    index = out / "report" / "index.html"
    pngs = list((out / "report" / "graphs").glob("*.png"))
    assert len(pngs) >= 10
    run = load_run(out)
    c = run.completions
    first = c.prompts[0]
    last_step = max(c.step[i] for i in range(len(c)) if c.prompt[i] == 0)
    best_total = max(c.total[i] for i in range(len(c)) if c.prompt[i] == 0 and c.step[i] == last_step)

    with Browser(binary) as browser:
        page = browser.new_page()
        page.goto(index.as_uri())
        assert page.eval("document.body.dataset.ready") == "1"
        loaded = page.eval("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
        assert len(loaded) == len(pngs) and all(loaded), loaded
        page.screenshot(ARTIFACTS / "report_graphs.png")

        page.eval("document.querySelector('nav button[data-tab=completions]').click()")
        view = page.eval("""(() => {
            const q = s => document.querySelector(s);
            const side = id => ({index: +q(id).dataset.index, text: q(id + ' .completion-text').textContent,
                                 title: q(id + ' .title').textContent, shown: q(id).offsetHeight > 0});
            return {selected: q('#prompt-body tr.sel').dataset.prompt, prompt: q('#cmp-prompt').textContent,
                    left: side('#cmp-left'), right: side('#cmp-right'),
                    rows: document.querySelectorAll('#all-body tr').length};
        })()""")
        assert view["selected"] == "0" and view["prompt"] == first.text
        for side in ("left", "right"):
            assert view[side]["shown"] and view[side]["text"] == c.text[view[side]["index"]]
            assert c.prompt[view[side]["index"]] == 0
        right = view["right"]["index"]
        assert c.step[right] == last_step and c.total[right] == best_total
        assert "best at the latest step" in view["right"]["title"]
        assert view["rows"] == min(first.count, 100)
        page.screenshot(ARTIFACTS / "report_completions.png")

        # the view-all table's buttons and the left slider drive the comparison
        moved = page.eval("""(() => {
            document.querySelectorAll('#all-body tr')[1].querySelector('button').click();
            const slider = document.querySelector('#cmp-left input[type=range]');
            slider.value = slider.max; slider.dispatchEvent(new Event('input'));
            return {left: +document.querySelector('#cmp-left').dataset.index,
                    title: document.querySelector('#cmp-left .title').textContent};
        })()""")
        assert c.step[moved["left"]] == last_step and f"step {last_step}" in moved["title"]

        page.eval("document.querySelector('nav button[data-tab=top]').click()")
        top = page.eval("[document.querySelectorAll('#top-high tbody tr').length, "
                        "document.querySelectorAll('#top-low tbody tr').length]")
        assert top == [min(25, len(c))] * 2
        page.eval("document.querySelector('nav button[data-tab=logs]').click()")
        logs = page.eval("""(() => {
            const rows = () => document.querySelectorAll('#logs-body tr').length;
            const all = rows();
            const fn = document.querySelector('#logs-fn');
            fn.value = 'chatty'; fn.dispatchEvent(new Event('input'));
            const chatty = rows();
            const errs = document.querySelector('#logs-errors');
            errs.checked = true; errs.dispatchEvent(new Event('input'));
            return {all, chatty, errors: rows(), text: document.querySelector('#logs-body').textContent};
        })()""")
        assert logs["all"] == 12 and logs["chatty"] == 6 and logs["errors"] == 1, logs
        assert "chatty fails on call 3" in logs["text"]
        page.screenshot(ARTIFACTS / "report_reward_logs.png")

        errors = page.console_errors()
        urls = page.request_urls()
    assert not errors, errors
    leaving = [u[:120] for u in urls if urlparse(u).scheme not in LOCAL_SCHEMES]
    assert not leaving, leaving
    assert any(u.startswith("file://") for u in urls)  # the network log did record the page itself
