"""rlft.progress: plain periodic lines when stderr is not a terminal (through the CLI, during a run's evaluations
and `rlft eval`), a live display on a real terminal (a pty) that leaves nothing behind, quiet, rank 0 only."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run_cli
from rlft import progress

DEMO = ROOT / "configs/examples/grpo_demo.yaml"
LINE = re.compile(r"^(eval start|eval at step 1|eval): (\d+)/(\d+) samples, \d+ s elapsed(, ETA \d+ s)?$")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 1-step tiny GRPO run with 8 eval prompts sampled 4 per generate call, a progress line at every call."""
    out = tmp_path_factory.mktemp("progress") / "run"
    res = run_cli("train", "--stage", "grpo", "-c", DEMO, f"train.output_dir={out}", "train.max_steps=1",
                  "data.eval_prompts=8", "eval.batch_size=4", env={"RLFT_PROGRESS_EVERY": "0"})
    assert res.returncode == 0, res.stderr[-3000:]
    return out, res


def _lines(stderr: str, label: str) -> list[tuple[int, int]]:
    return [(int(m[2]), int(m[3])) for m in map(LINE.match, stderr.splitlines()) if m and m[1] == label]


@pytest.mark.e2e
def test_eval_prints_periodic_lines_when_stderr_is_not_a_terminal(run):
    _, res = run
    start = _lines(res.stderr, "eval start")
    assert [done for done, _ in start] == list(range(8, 65, 8)), res.stderr[-3000:]  # 16 calls of 4 prompts x 8
    assert {total for _, total in start} == {64}
    assert "eval start: done, 64 samples" in res.stderr
    assert _lines(res.stderr, "eval at step 1")[-1] == (64, 64)  # eval.end
    err = res.stderr.splitlines()
    done = next(i for i, x in enumerate(err) if x.startswith("eval start: done, 64 samples, "))
    assert done < next(i for i, x in enumerate(err) if x.startswith("step 1:"))  # said before training began
    assert "grpo training: 1/1 steps, " in res.stderr  # a step of minutes has its timed lines too
    assert "\x1b[" not in res.stderr  # no terminal codes in a log


@pytest.mark.e2e
def test_rlft_eval_shows_progress_and_quiet_silences_it(run, tmp_path):
    out, _ = run
    res = run_cli("eval", out, "--data", "demo", "--max-prompts", "4", "-o", tmp_path / "a.jsonl",
                  env={"RLFT_PROGRESS_EVERY": "0"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert _lines(res.stderr, "eval") == [(4, 16), (8, 16), (12, 16), (16, 16)], res.stderr  # 4 prompts x 4
    for how in (["--quiet"], ["-q"]):
        quiet = run_cli("eval", out, "--data", "demo", "--max-prompts", "4", "-o", tmp_path / f"{how[0]}.jsonl",
                        *how,
                        env={"RLFT_PROGRESS_EVERY": "0"})
        assert quiet.returncode == 0 and "samples, " not in quiet.stderr, quiet.stderr
        assert "eval of " in quiet.stdout  # the results still print
    env = run_cli("eval", out, "--data", "demo", "--max-prompts", "4", "-o", tmp_path / "env.jsonl",
                  env={"RLFT_PROGRESS_EVERY": "0", "RLFT_QUIET": "1"})
    assert env.returncode == 0 and "samples, " not in env.stderr


def test_a_bad_period_is_one_line_exit_2(tmp_path):
    res = run_cli("eval", tmp_path, env={"RLFT_PROGRESS_EVERY": "soon"})
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "error: RLFT_PROGRESS_EVERY='soon' (environment): expected seconds between progress lines, a number from 0 "
        "to 86400 (default 10)"]


# -- unit level ---------------------------------------------------------------------------------------------------
class _Err:
    def __init__(self, capsys):
        self.capsys = capsys

    def getvalue(self) -> str:
        return self.capsys.readouterr().err


@pytest.fixture
def plain(monkeypatch, capsys):
    """stderr as a log: captured, not a terminal."""
    for key in ("RLFT_QUIET", "RANK"):
        monkeypatch.delenv(key, raising=False)
    return _Err(capsys)


def test_lines_come_from_the_timer_while_one_call_blocks(plain, monkeypatch):
    monkeypatch.setenv("RLFT_PROGRESS_EVERY", "0.2")
    with progress.task("collect", total=4, unit="episodes") as p:
        time.sleep(0.75)  # one long generate call: no advance, the timer still says the run is alive
        p.advance(1)
    lines = plain.getvalue().splitlines()
    assert 2 <= len([x for x in lines if x.startswith("collect: 0/4 episodes, ")]) <= 4, lines
    assert lines[-1].startswith("collect: done, 1 episodes, ")


def test_short_work_stays_silent(plain, monkeypatch):
    monkeypatch.setenv("RLFT_PROGRESS_EVERY", "10")
    with progress.task("load"), progress.task("eval", total=3, unit="samples") as p:
        p.advance(3)
    assert plain.getvalue() == ""


@pytest.mark.parametrize("env", [{"RANK": "1"}, {"RLFT_QUIET": "1"}])
def test_other_ranks_and_quiet_show_nothing(plain, monkeypatch, env):
    monkeypatch.setenv("RLFT_PROGRESS_EVERY", "0")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with progress.task("eval", total=2, unit="samples") as p:
        p.advance(1)
        p.advance(1)
        assert not p.show
    assert plain.getvalue() == ""
    monkeypatch.delenv(next(iter(env)))
    plain.getvalue()
    with progress.task("eval", total=2, unit="samples") as p:  # rank 0, not quiet: shown
        p.advance(2)
    assert plain.getvalue().startswith("eval: 2/2 samples")


def test_phases_label_the_work_and_the_line_format():
    with progress.phase("stage 2 (grpo) of 3"):
        assert progress.Task("eval start", show=False).label == "stage 2 (grpo) of 3 · eval start"
    assert progress.plain_line("eval start", 24, 64, "samples", 41) == "eval start: 24/64 samples, 41 s elapsed, " \
                                                                         "ETA 68 s"
    assert progress.plain_line("loading tiny", 0, None, "", 130) == "loading tiny: 2 min 10 s elapsed"


def test_rows_join_the_training_bar_instead_of_a_second_live_display(plain, monkeypatch):
    from rich.console import Console
    from rich.progress import Progress, TextColumn

    bar = Progress(TextColumn("{task.description} {task.fields[count]}"),
                   console=Console(file=io.StringIO(), force_terminal=True))
    bar.add_task("grpo", total=3, count="step 0/3")
    monkeypatch.setattr(progress, "terminal", lambda: True)
    bar.start()
    progress.attach(bar)
    try:
        with progress.task("eval at step 2", total=8, unit="samples") as p:
            p.advance(4)
            assert [t.description for t in bar.tasks] == ["grpo", "eval at step 2"]
            assert bar.tasks[1].fields["count"] == "4/8 samples"
        assert [t.description for t in bar.tasks] == ["grpo"]  # the row goes with its task
        assert progress._live is bar  # still the training bar's display: no second one was started
    finally:
        progress.detach(bar)
        bar.stop()


# -- a real terminal -----------------------------------------------------------------------------------------------
SCRIPT = """
import sys, time
from rlft import progress
print("before", flush=True)
with progress.task("eval start", total=6, unit="samples") as p:
    for _ in range(6):
        time.sleep(0.25)
        p.advance(1)
print("after", flush=True)
"""


def _screen(raw: str, width: int = 100) -> list[str]:
    """What a terminal shows after `raw`: a small emulator of what Rich's live display sends (carriage return,
    newline, cursor up, erase line; colours and cursor visibility ignored)."""
    rows, y, x = [""], 0, 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]", raw):
        if token == "\r":
            x = 0
        elif token == "\n":
            y, x = y + 1, 0
            rows += [""] * (y + 1 - len(rows))
        elif token.startswith("\x1b["):
            code, arg = token[-1], token[2:-1].lstrip("?")
            if code == "A":
                y = max(0, y - int(arg or 1))
            elif code == "K" and arg in ("2", ""):
                rows[y] = "" if arg == "2" else rows[y][:x]
        else:
            line = rows[y].ljust(x)
            rows[y] = line[:x] + token + line[x + 1:]
            x += 1
    return [r.rstrip() for r in rows]


def test_live_display_renders_on_a_terminal_and_leaves_nothing_behind():
    import pty

    main, child = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30", "PYTHONPATH": str(ROOT)}
    env.pop("RLFT_QUIET", None)
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdin=child, stdout=child, stderr=child, env=env,
                            cwd=ROOT)
    os.close(child)
    raw = b""
    while True:
        ready, _, _ = select.select([main], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    proc.wait(timeout=30)
    os.close(main)
    text = raw.decode("utf-8", "replace")
    assert proc.returncode == 0, text
    assert "eval start" in text and "samples" in text  # the row was drawn while the work ran
    assert re.search(r"[1-5]/6 samples", text), text
    screen = [r for r in _screen(text) if r.strip()]
    assert screen == ["before", "after"], screen  # cleared at the end: no row, no partial line left over
