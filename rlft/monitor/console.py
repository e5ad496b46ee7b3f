"""The console view of a run: a Rich progress bar with step, ETA and headline metrics on a
terminal, one plain line per logged step otherwise (CI logs, pipes)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import TrainerCallback

from rlft import progress as shared
from rlft.config.stages import SPECS



def _fmt(key: str, value) -> str:
    short = key.rsplit("/", 1)[-1]
    return f"{short} {value:.4g}" if isinstance(value, (int, float)) else f"{short} -"


class ConsoleProgress(TrainerCallback):
    def __init__(self, stage: str):
        self.stage = stage
        self.console = Console(stderr=True)
        self.live = self.console.is_terminal
        self.quiet = shared.quiet()  # --quiet / RLFT_QUIET: no bar and no per-step lines (warnings still print)
        self.progress = None
        self.task = None
        self.plain = None  # the timed progress lines of a log (rlft.progress), when stderr is not a terminal
        self.keys = list(SPECS[stage].console) if stage in SPECS else ["loss"]
        self.alerts: dict[str, int] = {}  # health firings by level, shown on the progress bar

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or self.quiet:
            return
        if self.live:
            # the count is a field, so rows of rlft.progress (an eval's samples) share this live display
            self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                     TextColumn("{task.fields[count]}"), TimeElapsedColumn(),
                                     TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[metrics]}"),
                                     TextColumn("{task.fields[alerts]}"), console=self.console)
            self.progress.start()
            shared.attach(self.progress)
            self.task = self.progress.add_task(self.stage, total=state.max_steps, completed=state.global_step,
                                               metrics="", count=f"step {state.global_step}/{state.max_steps}",
                                               alerts=self.alert_text())
        else:
            self.console.print(f"rlft {self.stage}: training to step {state.max_steps} (from {state.global_step})")
            # a step of minutes is otherwise silent in a log until it ends: a timed line, as long work has
            self.plain = shared.Task(f"{self.stage} training", total=state.max_steps, unit="steps")
            self.plain.update(completed=state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step,
                                 count=f"step {state.global_step}/{state.max_steps}")
        elif self.plain is not None:
            self.plain.update(completed=state.global_step)

    def on_metrics(self, record: dict) -> None:
        prefix = "eval_" if any(k.startswith("eval_") for k in record) else ""  # eval_loss, eval_rewards/...
        text = ("eval: " if prefix else "") + "  ".join(
            _fmt(k, record.get(prefix + k)) for k in self.keys if prefix + k in record)
        if "generation" in record:  # a later substep/epoch shows its generation's reward again: say so
            reused = record.get("reused_generation")
            text = f"gen {record['generation']}{' (reused)' if reused else ''}  {text}"
        if self.progress is not None:
            self.progress.update(self.task, metrics=text)
        elif not self.quiet:
            print(f"step {record['step']}: {text}", file=sys.stderr, flush=True)

    def alert_text(self) -> str:
        """`[critical x3, warning x1]` in the alert's colour, or '' before any health rule fired."""
        parts = [f"[{'bold red' if level == 'critical' else 'yellow'}]{level} x{n}[/]"
                 for level, n in sorted(self.alerts.items())]
        return ("health: " + ", ".join(parts)) if parts else ""

    def alert(self, level: str) -> None:
        """Count a health-rule firing; the progress bar keeps showing the levels seen so far (a warning
        that goes to health.jsonl only is otherwise invisible once the bar redraws)."""
        self.alerts[level] = self.alerts.get(level, 0) + 1
        if self.progress is not None:
            self.progress.update(self.task, alerts=self.alert_text())

    def message(self, text: str, style: str = "") -> None:
        if self.progress is not None:
            self.progress.console.print(text, style=style)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.plain is not None:
            self.plain.close()
            self.plain = None
        if self.progress is not None:
            shared.detach(self.progress)
            self.progress.stop()
            self.progress = None
