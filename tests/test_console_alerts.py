"""The progress bar shows the level of health alerts (warnings that go to health.jsonl only would otherwise
vanish when the bar redraws)."""

from __future__ import annotations

import io

import pytest

pytest.importorskip("transformers")

from rich.console import Console  # noqa: E402

from rlft.monitor.console import ConsoleProgress  # noqa: E402


class _State:
    is_world_process_zero = True
    max_steps = 10
    global_step = 0


def test_progress_bar_shows_alert_levels():
    progress = ConsoleProgress("grpo")
    progress.console = Console(file=io.StringIO(), force_terminal=True, width=200)
    progress.live = True
    progress.on_train_begin(None, _State(), None)
    try:
        assert progress.progress.tasks[0].fields["alerts"] == ""
        progress.alert("warning")
        progress.alert("critical")
        progress.alert("critical")
        text = progress.progress.tasks[0].fields["alerts"]
        assert text == "health: [bold red]critical x2[/], [yellow]warning x1[/]"
    finally:
        progress.close()


def test_plain_mode_counts_alerts_too():
    progress = ConsoleProgress("dpo")
    progress.alert("warning")
    assert progress.alert_text() == "health: [yellow]warning x1[/]"
