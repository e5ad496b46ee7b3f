"""One run lifecycle for every stage: quiet logs, run folder, resume, safe interruption,
progress, metrics, health rules and the final model. Stage recipes build a trainer and hand it to
`RunContext.train`; everything around training lives here once."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
import warnings
from pathlib import Path

from rlft.config.compose import Composed, flatten
from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec
from rlft.run import COMPLETE_MARKER, RunDir, RunError, RunOptions, check_run_dir, checkpoint_step, prepare_run_dir

log = logging.getLogger("rlft")
RLFT_STATE = "rlft_state.json"
# keys whose change makes a checkpoint meaningless (shapes, data order, the objective); each stage's
# own keys come from its StageSpec.resume_breaking
RESUME_BREAKING = ("stage", "model.name_or_path", "lora.r", "lora.lora_alpha", "lora.target_modules", "lora.enabled",
                   "train.per_device_train_batch_size", "train.gradient_accumulation_steps", "train.seed",
                   "data.train", "hw.num_processes")


def quiet_libraries(verbose: bool) -> None:
    """Libraries print a lot by default; rlft shows its own progress and metrics instead (-v restores them)."""
    if verbose:
        logging.basicConfig(level=logging.INFO)
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("transformers", "trl", "peft", "datasets", "accelerate", "torch"):
        logging.getLogger(name).setLevel(logging.ERROR)


def breaking_changes(run: RunDir, cfg: RlftConfig) -> list[str]:
    """Resume-breaking keys whose value differs from the run's saved config.yaml."""
    import yaml
    from dataclasses import asdict

    if not run.config.is_file():
        return []
    old = flatten(yaml.safe_load(run.config.read_text()) or {})
    new = flatten(asdict(cfg))
    keys = RESUME_BREAKING + get_spec(cfg.stage).resume_breaking
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if k in old and old.get(k) != new.get(k)]


class _Interrupt:
    """SIGINT/SIGTERM: finish the current step, checkpoint, exit; a second Ctrl-C exits at once."""

    def __init__(self):
        self.signal: int | None = None
        self._old = {}

    def install(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)

    def restore(self):
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _handle(self, signum, frame):
        if self.signal is not None:  # second signal: stop now
            self.restore()
            raise KeyboardInterrupt
        self.signal = signum
        name = signal.Signals(signum).name
        print(f"\n{name} received: finishing the current step and writing a checkpoint "
              f"(press Ctrl-C again to exit at once)", file=sys.stderr, flush=True)


class RunContext:
    """`with RunContext(cfg, composed, opts) as ctx:` ... `ctx.train(trainer, tokenizer)`."""

    def __init__(self, cfg: RlftConfig, composed: Composed, opts: RunOptions):
        self.cfg, self.composed, self.opts = cfg, composed, opts
        self.num_processes = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.interrupt = _Interrupt()
        self.resume_from: Path | None = None
        self.threads_note = "cpu threads: torch default"
        self._opened = False
        self.extra_state: dict = {}
        self.exit_code: int | None = None  # set by train(); None at exit means the run failed
        self.steps = 0
        self.eval: dict = {}  # stages that score fresh samples fill eval["start"] / eval["end"]

    # -- set-up --------------------------------------------------------------------------------
    def __enter__(self) -> "RunContext":
        """Process set-up and the run folder's preconditions; nothing is written until `open_run`."""
        quiet_libraries(self.opts.verbose)
        self.started = time.monotonic()
        self.run = check_run_dir(self.cfg, self.opts)
        from rlft.models.hardware import resolve_cpu_threads

        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        threads, self.threads_note, warning = resolve_cpu_threads(self.cfg.hw.cpu_threads, local)
        if threads:
            import torch

            torch.set_num_threads(threads)
        if warning and self.rank == 0:
            print(f"rlft: WARNING {warning}", file=sys.stderr)
        from transformers import set_seed

        set_seed(self.cfg.train.seed)
        return self

    def open_run(self) -> RunDir:
        """Create the run folder (config.yaml, an empty health.jsonl) once the model and data have loaded,
        so a run that fails while loading leaves nothing that blocks the corrected rerun."""
        self.run = prepare_run_dir(self.cfg, self.composed, self.opts)
        self._opened = True
        if self.rank == 0:
            self.run.health.touch()
        if self.opts.resume:
            self.resume_from = self._resolve_resume()
        self.interrupt.install()
        return self.run

    def __exit__(self, exc_type, exc, tb):
        self.interrupt.restore()
        if self.rank == 0 and self._opened:  # a run that failed while loading leaves no folder behind
            self.write_summary(None if exc_type is not None else self.exit_code,
                               error=f"{exc_type.__name__}: {exc}" if exc_type is not None else None)
        return False

    def write_summary(self, code: int | None, error: str | None = None) -> None:
        """summary.json for how the run ended; never lets a write failure hide the run's own outcome."""
        from rlft.monitor.summary import last_metrics, status_for, write_summary

        extra = {"exit_code": code if code is not None else 1}
        if error:
            extra["error"] = error[:2000]
        try:
            write_summary(self.run.root / "summary.json", stage=self.cfg.stage, status=status_for(code),
                          steps=self.steps, wall_s=time.monotonic() - self.started,
                          last=last_metrics(self.run.metrics), eval=self.eval, **extra)
        except OSError as e:
            print(f"rlft: could not write summary.json: {e}", file=sys.stderr)

    def _resolve_resume(self) -> Path | None:
        changed = breaking_changes(self.run, self.cfg)
        if changed:
            raise RunError("cannot resume: these settings changed since the run started and would break its "
                           "checkpoints: " + "; ".join(changed) + ". Start a new run (another train.output_dir) instead.")
        all_dirs = sorted(self.run.checkpoints.glob("checkpoint-*"), key=checkpoint_step)
        good = self.run.complete_checkpoints()
        skipped = [p.name for p in all_dirs if p not in good]
        if skipped:
            print(f"rlft: ignoring incomplete checkpoint(s) {', '.join(skipped)} (a save was interrupted)", file=sys.stderr)
        if not good:
            if self.run.final.exists():
                raise RunError(f"nothing left to do: {self.run.root} holds a finished run (final/) and no checkpoint to continue from")
            raise RunError(f"no complete checkpoint to resume in {self.run.checkpoints}; start again with --overwrite")
        newest = good[-1]
        step = checkpoint_step(newest)
        target = self.cfg.train.max_steps
        if target > 0 and step >= target:
            raise RunError(f"nothing left to do: the newest checkpoint is at step {step} and train.max_steps is {target}; "
                           f"raise train.max_steps to train further")
        state_file = newest / RLFT_STATE
        if state_file.is_file():
            self.extra_state = json.loads(state_file.read_text())
        if self.rank == 0:
            print(f"rlft: resuming {self.run.root} from step {step} to step "
                  f"{target if target > 0 else 'the end of the data'}", file=sys.stderr)
        return newest

    # -- callbacks -----------------------------------------------------------------------------
    def callbacks(self) -> list:
        from rlft.monitor.callbacks import CheckpointMarker, InterruptCallback
        from rlft.monitor.console import ConsoleProgress
        from rlft.monitor.health import HealthMonitor
        from rlft.monitor.metrics import MetricsWriter

        self.console = ConsoleProgress(self.cfg.stage)
        self.health = HealthMonitor(self.cfg, self.run, self.console)
        return [MetricsWriter(self.run.metrics, self.cfg.stage, self.console, self.health), self.console,
                InterruptCallback(self.interrupt), CheckpointMarker(self), self.health]

    def rlft_state(self, trainer) -> dict:
        """State rlft adds to each checkpoint (e.g. the adaptive KL coefficient)."""
        state = {}
        kl_ctl = getattr(trainer, "kl_ctl", None)
        if kl_ctl is not None:
            state["kl_controller"] = kl_ctl.state_dict()
        return state

    def load_rlft_state(self, trainer) -> None:
        kl_ctl = getattr(trainer, "kl_ctl", None)
        if kl_ctl is not None and "kl_controller" in self.extra_state:
            kl_ctl.load_state_dict(self.extra_state["kl_controller"])

    # -- training ------------------------------------------------------------------------------
    def train(self, trainer, tokenizer) -> int:
        self.exit_code = self._train(trainer, tokenizer)
        self.steps = trainer.state.global_step
        return self.exit_code

    def _train(self, trainer, tokenizer) -> int:
        from rlft.monitor.health import RunStopped
        from rlft.rewards import RewardFailureError

        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # rlft prints its own line per logged step
        self.trainer = trainer
        self.health.attach(trainer, self)
        self.load_rlft_state(trainer)
        try:
            trainer.train(resume_from_checkpoint=str(self.resume_from) if self.resume_from else None)
        except RunStopped as exc:
            self._save_now(trainer)
            print(f"rlft: stopped by health rule: {exc}. A checkpoint was written; resume with "
                  f"`rlft train ... --resume` after fixing the cause.", file=sys.stderr)
            return 4
        except RewardFailureError as exc:
            self._save_now(trainer)
            print(f"rlft: stopped: {exc} A checkpoint was written; fix the rewards and resume with --resume.",
                  file=sys.stderr)
            return 4
        except KeyboardInterrupt:
            print("rlft: interrupted twice: exited without a new checkpoint", file=sys.stderr)
            return 130
        finally:
            self.console.close()
        if self.interrupt.signal is not None:
            step = trainer.state.global_step
            print(f"rlft: interrupted at step {step}; checkpoint written to {self.run.checkpoints}. "
                  f"Resume with the same command plus --resume", file=sys.stderr)
            return 130  # Ctrl-C's code for SIGTERM too: one "interrupted, resumable" code
        self.check_ranks_in_sync(trainer)
        self.save_final(trainer, tokenizer)
        return 0

    def check_ranks_in_sync(self, trainer) -> None:
        """Multi-process runs: every rank's trainable weights must be identical after training
        (DDP all-reduces gradients). Rank 0 records each rank's checksum in distributed.json."""
        acc = trainer.accelerator
        if acc.num_processes < 2:
            return
        import torch

        model = acc.unwrap_model(trainer.model)
        total = sum(p.detach().double().sum() for p in model.parameters() if p.requires_grad)
        sums = acc.gather(torch.as_tensor(total, device=acc.device).reshape(1)).tolist()
        if acc.is_main_process:
            in_sync = max(sums) - min(sums) <= 1e-9 * max(1.0, abs(sums[0]))
            (self.run.root / "distributed.json").write_text(json.dumps(
                {"num_processes": acc.num_processes, "param_checksums": sums, "in_sync": in_sync}))
            if not in_sync:
                print(f"rlft: WARNING ranks diverged: trainable-parameter checksums {sums}", file=sys.stderr)

    def _save_now(self, trainer) -> None:
        trainer._save_checkpoint(trainer.model, trial=None)
        self.mark_complete(trainer)

    def mark_complete(self, trainer) -> None:
        """Write rlft's state and the completion marker last: resume only trusts marked checkpoints."""
        if not trainer.args.should_save:
            return
        path = self.run.checkpoints / f"checkpoint-{trainer.state.global_step}"
        if path.is_dir():
            (path / RLFT_STATE).write_text(json.dumps(self.rlft_state(trainer)))
            (path / COMPLETE_MARKER).write_text("ok\n")

    def describe_final(self, folder: Path, steps: int) -> None:
        """The adapter names its base model as the user gave it (not a cache path), and the model card says
        what rlft trained instead of the library boilerplate."""
        from rlft.monitor.model_card import model_card

        adapter = folder / "adapter_config.json"
        if adapter.is_file():
            data = json.loads(adapter.read_text())
            data["base_model_name_or_path"] = self.cfg.model.name_or_path
            adapter.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        card = model_card(self.cfg, steps)
        (folder / "README.md").write_text(card)
        if (self.run.checkpoints / "README.md").is_file():  # TRL's card there says "fine-tuned version of [None]"
            (self.run.checkpoints / "README.md").write_text(card)

    def save_final(self, trainer, tokenizer) -> None:
        """A standard PEFT adapter (or full model) + tokenizer that plain `from_pretrained` loads."""
        tmp = self.run.root / "final.tmp"
        trainer.save_model(str(tmp))
        if trainer.args.should_save:
            tokenizer.save_pretrained(str(tmp))
            self.describe_final(tmp, trainer.state.global_step)
            import shutil

            if self.run.final.exists():
                shutil.rmtree(self.run.final)
            tmp.rename(self.run.final)
            print(f"rlft: done at step {trainer.state.global_step}; final model in {self.run.final}", file=sys.stderr)
