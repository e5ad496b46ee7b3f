"""The console view of a run: a Rich progress bar with step, ETA and headline metrics on a
terminal, one plain line per logged step otherwise (CI logs, pipes)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import TrainerCallback

from rlft.config.stages import SPECS



def _fmt(key: str, value) -> str:
    short = key.rsplit("/", 1)[-1]
    return f"{short} {value:.4g}" if isinstance(value, (int, float)) else f"{short} -"


class ConsoleProgress(TrainerCallback):
    def __init__(self, stage: str):
        self.stage = stage
        self.console = Console(stderr=True)
        self.live = self.console.is_terminal
        self.progress = None
        self.task = None
        self.keys = list(SPECS[stage].console) if stage in SPECS else ["loss"]

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        if self.live:
            self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                     TextColumn("step {task.completed}/{task.total}"), TimeElapsedColumn(),
                                     TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[metrics]}"),
                                     console=self.console)
            self.progress.start()
            self.task = self.progress.add_task(self.stage, total=state.max_steps, completed=state.global_step, metrics="")
        else:
            self.console.print(f"rlft {self.stage}: training to step {state.max_steps} (from {state.global_step})")

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_metrics(self, record: dict) -> None:
        prefix = "eval_" if any(k.startswith("eval_") for k in record) else ""  # eval_loss, eval_rewards/...
        text = ("eval: " if prefix else "") + "  ".join(
            _fmt(k, record.get(prefix + k)) for k in self.keys if prefix + k in record)
        if self.progress is not None:
            self.progress.update(self.task, metrics=text)
        else:
            print(f"step {record['step']}: {text}", file=sys.stderr, flush=True)

    def message(self, text: str, style: str = "") -> None:
        if self.progress is not None:
            self.progress.console.print(text, style=style)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
