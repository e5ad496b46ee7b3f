"""One run lifecycle for every stage: quiet logs, run folder, resume, safe interruption,
progress, metrics, health rules and the final model. Stage recipes build a trainer and hand it to
`RunContext.train`; everything around training lives here once."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import time
import warnings
from pathlib import Path

from rlft.config.compose import Composed, flatten
from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec
from rlft.run import (COMPLETE_MARKER, RunDir, RunError, RunOptions, check_run_dir, checkpoint_step, config_changes,
                      prepare_run_dir, resume_command, saved_config)
from rlft.run_config import RunConfigError, read_run_config

log = logging.getLogger("rlft")
RLFT_STATE = "rlft_state.json"
# keys whose change makes a checkpoint meaningless (shapes, data order, the objective); each stage's
# own keys come from its StageSpec.resume_breaking
RESUME_BREAKING = ("stage", "model.name_or_path", "lora.r", "lora.lora_alpha", "lora.target_modules", "lora.enabled",
                   "train.per_device_train_batch_size", "train.gradient_accumulation_steps", "train.seed",
                   "data.train", "hw.num_processes", "train.optim")


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


def tracker_env(report_to: list[str], run_root: Path, environ) -> dict[str, str]:
    """Environment that sends the trackers' files into the run folder: TensorBoard event files to
    `<run>/tensorboard/` (transformers would use checkpoints/runs/), wandb's local files to `<run>/`.
    A value the user exported already wins (one rlft set for an earlier run in this process does not)."""
    wanted = {}
    if "tensorboard" in report_to:
        wanted["TENSORBOARD_LOGGING_DIR"] = str(run_root / "tensorboard")
    if "wandb" in report_to:
        wanted["WANDB_DIR"] = str(run_root)
    out = {k: v for k, v in wanted.items() if not environ.get(k) or environ.get(k) == _TRACKER_ENV_SET.get(k)}
    _TRACKER_ENV_SET.update(out)
    return out


_TRACKER_ENV_SET: dict[str, str] = {}


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header, then the tensors it lists."""
    import struct

    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size:
                raise ValueError
            header = json.loads(f.read(n))
    except (struct.error, ValueError, UnicodeDecodeError):
        return f"{path.name} is truncated or not safetensors ({size} bytes)"
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        return f"{path.name} is truncated ({size} of {8 + n + end} bytes)"
    return None


def _torch_file_problem(path: Path) -> str | None:
    """torch.save writes a zip archive; a truncated one has lost its central directory."""
    import zipfile

    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != b"PK":  # torch.save has written zip archives since torch 1.6; anything else is not one of its files
        return (f"{path.name} is empty or truncated" if path.stat().st_size < 2
                else f"{path.name} is not a torch.save archive ({path.stat().st_size} bytes)")
    try:
        zipfile.ZipFile(path).close()
    except (zipfile.BadZipFile, OSError):
        return f"{path.name} is truncated ({path.stat().st_size} bytes)"
    return None


WEIGHT_FILES = ("adapter_model.safetensors", "model.safetensors", "model.safetensors.index.json", "adapter_model.bin",
                "pytorch_model.bin", "pytorch_model.bin.index.json")


def _json_kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


def _read_json(path: Path) -> tuple[object, str | None]:
    """(data, None), or (None, why it cannot be read)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None, f"{path.name} is not valid JSON"


def _fits(value, hint) -> bool:
    """Whether a JSON value fits a dataclass field's type hint (int, float, bool, str, list[...], dict[...], X | None)."""
    import types
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint in (int, float):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and (hint is float or (math.isfinite(value) and float(value).is_integer()))
    if hint is str:
        return isinstance(value, str)
    if origin is list or hint is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value) if args else isinstance(value, list)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True  # a type JSON cannot hold: transformers rebuilds it


def _trainer_state_problem(path: Path, step: int) -> str | None:
    """What in trainer_state.json would stop transformers' TrainerState from loading it or training on from it."""
    import dataclasses
    import typing

    from transformers import TrainerState

    data, problem = _read_json(path)
    if problem:
        return problem
    if not isinstance(data, dict):
        return f"{path.name} holds {_json_kind(data)}, not an object"
    hints = typing.get_type_hints(TrainerState)
    known = {f.name for f in dataclasses.fields(TrainerState)}
    unknown = sorted(set(data) - known)
    if unknown:
        return f"{path.name} has keys TrainerState does not know: {', '.join(unknown[:5])}"
    for name in sorted(data):
        # stateful_callbacks is a list of callbacks in memory and a {name: state} object in the file
        hint = dict | None if name == "stateful_callbacks" else hints[name]
        value = data[name]
        if not _fits(value, hint):
            shown = f" {value!r:.40}" if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
            wanted = getattr(hint, "__name__", None) if isinstance(hint, type) and not typing.get_args(hint) else hint
            return f"{path.name}: {name} is {_json_kind(value)}{shown}, not {wanted or hint}"
    if type(data.get("global_step")) is not int or data["global_step"] != step:
        return f"{path.name} says global_step {data.get('global_step')!r} in checkpoint-{step}"
    return None


def _rng_state_problem(path: Path) -> str | None:
    """An RNG state file loads the way transformers loads it and each generator accepts its state."""
    import random

    import numpy as np
    import torch
    from transformers.trainer_pt_utils import safe_globals

    try:
        with safe_globals():
            state = torch.load(path, weights_only=True)
        random.Random().setstate(state["python"])
        np.random.RandomState().set_state(state["numpy"])
        torch.Generator().set_state(state["cpu"])
    except Exception as exc:  # noqa: BLE001 - unpickling, a missing key or a generator's refusal: all mean damaged
        return f"{path.name} does not load ({type(exc).__name__})"
    return None


def _optimizer_files_problem(folder: Path) -> str | None:
    """optimizer.pt and scheduler.pt hold the state dicts torch's load_state_dict reads (memory-mapped: an
    optimizer's tensors are not read here)."""
    import torch

    for name in ("optimizer.pt", "scheduler.pt"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            state = torch.load(path, weights_only=True, mmap=True, map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - whatever unpickling raises, the file does not load
            return f"{name} does not load ({type(exc).__name__})"
        groups = state.get("param_groups") if isinstance(state, dict) else None
        if not isinstance(state, dict) or name == "optimizer.pt" and not (
                isinstance(state.get("state"), dict) and isinstance(groups, list)
                and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups)):
            return f"{name} does not hold {'an optimizer' if name == 'optimizer.pt' else 'a scheduler'} state"
    return None


def rlft_state_problem(path: Path) -> str | None:
    """rlft_state.json is an object whose parts RunContext and the stages read before the trainer loads it
    are objects. Whether it holds every key the trainer writes is checked at load (`RunContext._state_problem`)."""
    if not path.is_file():
        return None
    data, problem = _read_json(path)
    if problem:
        return problem
    if not isinstance(data, dict):
        return f"{path.name} holds {_json_kind(data)}, not an object"
    for key in ("kl_controller", "trainer"):
        if key in data and not isinstance(data[key], dict):
            return f"{path.name}: {key} is {_json_kind(data[key])}, not an object"
    start = data.get("trainer", {}).get("eval_start")
    if start is not None and not isinstance(start, dict):
        return f"{path.name}: trainer.eval_start is {_json_kind(start)}, not an object"
    return None


def checkpoint_problem(path: Path) -> str | None:
    """Why a marked checkpoint cannot be resumed from (missing, truncated or damaged files), or None if it looks
    whole: every file a resume loads is read here the way the trainer reads it, before anything is trained."""
    state = path / "trainer_state.json"
    if not state.is_file():
        return "trainer_state.json is missing"
    problem = _trainer_state_problem(state, checkpoint_step(path))
    if problem:
        return problem
    if not any((path / name).is_file() for name in WEIGHT_FILES) and not any(path.glob("pytorch_model_fsdp*")):
        return "it holds no model weights"
    for file in sorted(path.glob("*.safetensors")):
        problem = _safetensors_problem(file)
        if problem:
            return problem
    for file in sorted([*path.glob("*.pt"), *path.glob("*.pth"), *path.glob("*.bin")]):
        problem = _torch_file_problem(file)
        if problem:
            return problem
    for file in sorted(path.glob("rng_state*.pth")):
        problem = _rng_state_problem(file)
        if problem:
            return problem
    return _optimizer_files_problem(path) or rlft_state_problem(path / RLFT_STATE)


def read_rlft_state(path: Path) -> dict:
    """A checkpoint's rlft_state.json ({} when absent); call after `checkpoint_problem` passed."""
    state = path / RLFT_STATE
    return json.loads(state.read_text(encoding="utf-8")) if state.is_file() else {}


def drop_rows_after(path: Path, step: int) -> int:
    """Remove rows of steps after `step` from a jsonl log: a resumed run trains them again and writes them anew.
    A line cut short by a kill goes too. A whole line that is not a row with a numeric step is kept byte for
    byte (nothing of the user's is deleted; `rlft report` skips it) and counted in a warning."""
    if not path.is_file():
        return 0
    keep, dropped, odd, changed = [], 0, 0, False
    for line in path.read_bytes().splitlines(keepends=True):
        if not line.strip():
            changed = True
            continue
        try:
            row = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8
            row = None
        if not line.endswith(b"\n"):
            if row is None:  # a line cut short by a kill: not a row
                dropped += 1
                continue
            line, changed = line + b"\n", True  # the next append would run on from it
        row_step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(row_step, (int, float)) or isinstance(row_step, bool) or row_step != row_step:
            odd += 1
            keep.append(line)
        elif row_step > step:
            dropped += 1
        else:
            keep.append(line)
    if odd:
        print(f"rlft: WARNING {odd} line(s) of {path.name} are not rows with a numeric step; kept as they are "
              f"(rlft report skips them)", file=sys.stderr)
    if dropped or changed:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"".join(keep))
        os.replace(tmp, path)
    if dropped:
        print(f"rlft: removed {dropped} row(s) after step {step} from {path.name}: those steps run again",
              file=sys.stderr)
    return dropped


def breaking_changes(run: RunDir, cfg: RlftConfig) -> list[str]:
    """Resume-breaking keys whose value differs from the run's saved config.yaml."""
    from rlft.config.schema import to_dict

    saved = saved_config(run.root)
    if saved is None:
        return []
    old = flatten(saved)
    new = flatten(to_dict(cfg))
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

    def __init__(self, cfg: RlftConfig, composed: Composed, opts: RunOptions, *, own_resume: bool = False):
        self.cfg, self.composed, self.opts = cfg, composed, opts
        self.own_resume = own_resume  # the stage picks its checkpoints itself (e.g. one folder per round)
        self.num_processes = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.interrupt = _Interrupt()
        self.resume_from: Path | None = None
        self.final_only = False  # resume of a run killed during its final save: only redo that save
        self.threads_note = "cpu threads: torch default"
        self._run: RunDir | None = None  # created by open_run (or on first use of .run)
        self.config_changes: dict = {}  # key -> (old, new), a resume with --allow-config-change
        self.extra_state: dict = {}
        self.exit_code: int | None = None  # set by train(); None at exit means the run failed
        self.began = False  # a training step began in this process (the resume's changes to the logs are made)
        self.steps = 0
        self.max_steps: int | None = None
        self.eval: dict = {}  # stages that score fresh samples fill eval["start"] / eval["end"]

    # -- set-up --------------------------------------------------------------------------------
    def __enter__(self) -> "RunContext":
        """Process set-up and the run folder's preconditions (checked, nothing written); the folder itself is
        created by `open_run`, which a stage calls once its data and model have loaded."""
        quiet_libraries(self.opts.verbose)
        self.started = time.monotonic()
        self.planned = check_run_dir(self.cfg, self.opts)
        from rlft.models.hardware import resolve_cpu_threads

        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        threads, self.threads_note, warning = resolve_cpu_threads(self.cfg.hw.cpu_threads, local)
        if threads:
            import torch

            torch.set_num_threads(threads)
        if self.rank == 0:
            print(f"rlft: {self.threads_note}", file=sys.stderr)
            if warning:
                print(f"rlft: WARNING {warning}", file=sys.stderr)
        from transformers import set_seed

        set_seed(self.cfg.train.seed)
        return self

    @property
    def run(self) -> RunDir:
        """The run folder; opened on first use for stages that do not call `open_run` themselves."""
        if self._run is None:
            self.open_run()
        return self._run

    def open_run(self) -> RunDir:
        """Create (or reopen for --resume) and lock the run folder, write config.yaml and an empty
        health.jsonl, and resolve the checkpoint to resume from. A run that fails while loading its data or
        model never gets here, so nothing blocks the corrected rerun."""
        if self._run is not None:
            return self._run
        run = self._run = prepare_run_dir(self.cfg, self.composed, self.opts)
        os.environ.update(tracker_env(self.cfg.train.report_to, run.root, os.environ))
        try:
            if self.opts.resume:
                if self.own_resume:
                    self._check_config()
                else:
                    self.resume_from = self._resolve_resume()
            if self.rank == 0 and not run.health.exists():
                run.health.touch()
        except BaseException:
            run.release()
            self._run = None
            raise
        if self.rank == 0:
            print(f"rlft: run folder {run.root}; to continue it after a stop: {self.resume_command}",
                  file=sys.stderr)
        self.interrupt.install()
        return run

    def __exit__(self, exc_type, exc, tb):
        self.interrupt.restore()
        run = self._run  # a run that failed before its folder was opened leaves none behind
        if run is not None:
            if isinstance(exc, RunError):  # a stage's own clear stop (bad data, nothing to train on)
                code, error = exc.exit_code, str(exc)
            else:
                code = None if exc_type is not None else self.exit_code
                error = f"{exc_type.__name__}: {exc}" if exc_type is not None else None
            # a resume that fails before training a step changed nothing: the summary of the run as it
            # stands (finished, interrupted at step N) stays true, and a "failed at step 0" would hide it
            from rlft.monitor.summary import status_for

            failed_resume = self.opts.resume and not self.began and status_for(code) == "failed"
            if self.rank == 0 and not failed_resume:
                self.write_summary(code, error=error)
            if run.replaced is not None and self.rank == 0:
                print(f"rlft: the run replaced by --overwrite is kept at {run.replaced} (this run wrote no "
                      f"checkpoint); move it back or delete it", file=sys.stderr)
            run.release()
        return False

    @property
    def resume_command(self) -> str:
        if self.opts.resume_hint:
            return self.opts.resume_hint
        return resume_command(self.run.root, self.opts.argv or ["--stage", self.cfg.stage])

    def write_summary(self, code: int | None, error: str | None = None) -> None:
        """summary.json for how the run ended; never lets a write failure hide the run's own outcome."""
        from rlft.monitor.summary import last_metrics, print_summary, run_numbers, status_for, write_summary

        extra = {"exit_code": code if code is not None else 1}
        if error:
            extra["error"] = error[:2000]
        if self.max_steps:
            extra["max_steps"] = self.max_steps
        saved = [(checkpoint_step(p), p) for p in self.run.complete_checkpoints()]
        if self.run.final.is_dir():
            saved.append((self.steps, self.run.final))
        try:
            summary = write_summary(self.run.root / "summary.json", stage=self.cfg.stage, status=status_for(code),
                                    steps=self.steps, wall_s=time.monotonic() - self.started,
                                    last=last_metrics(self.run.metrics), eval=self.eval,
                                    **extra, **run_numbers(self.run.root, saved))
        except OSError as e:
            print(f"rlft: could not write summary.json: {e}", file=sys.stderr)
            return
        try:
            print_summary(summary, self.run.root)
        except (OSError, ValueError):  # a closed terminal must not turn a finished run into a failure
            pass

    def _saved_config(self) -> dict | None:
        """The run's config.yaml (None when there is none); a RunError when it cannot be read as settings:
        resuming unchecked could continue checkpoints with settings they were not trained with."""
        try:
            return read_run_config(self.run.root, empty_ok=False)
        except RunConfigError as exc:
            if exc.missing:
                return None
            problem = f"is not readable YAML ({exc.why})" if exc.found is None else \
                f"holds {exc.found}, not the run's settings"
            raise RunError(f"cannot resume: {exc.path} {problem}. It records the settings the checkpoints were trained "
                           f"with: restore it, or delete it to resume with the current settings unchecked") from None

    def _check_config(self) -> None:
        """Resume with the config the run started with: list every changed key; refuse shape-changing ones,
        and the rest unless --allow-config-change (then they are applied)."""
        old = self._saved_config()
        if old is None:
            return
        changes = config_changes(old, self.cfg)
        breaking = RESUME_BREAKING + get_spec(self.cfg.stage).resume_breaking
        listed = "".join(f"\n  {k}: {a!r} -> {b!r}" for k, a, b in changes)
        if any(k in breaking for k, _, _ in changes):
            raise RunError("cannot resume: these settings changed since the run started and would break its "
                           "checkpoints: " + "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changes if k in breaking)
                           + ". Start a new run (another train.output_dir) instead.")
        if changes and not self.opts.allow_config_change:
            raise RunError(f"cannot resume {self.run.root}: {len(changes)} setting(s) changed since the run started:"
                           f"{listed}\nPass --allow-config-change to continue with the new values, or undo the changes.")
        if changes and self.rank == 0:
            print(f"rlft: resuming with a changed config (--allow-config-change):{listed}", file=sys.stderr)
        self.config_changes = {k: (a, b) for k, a, b in changes}

    def newest_checkpoint(self, folder: Path) -> Path | None:
        """The newest complete checkpoint in `folder` (None if there is none), its rlft state loaded; damaged
        ones are moved aside with a warning, as for `--resume`."""
        good = sorted((p for p in Path(folder).glob("checkpoint-*") if (p / COMPLETE_MARKER).is_file()),
                      key=checkpoint_step) if Path(folder).is_dir() else []
        while good and (problem := checkpoint_problem(good[-1])):
            bad = good.pop()
            self._set_aside(bad, problem, good[-1] if good else None)
        self.extra_state = read_rlft_state(good[-1]) if good else {}
        return good[-1] if good else None

    def _set_aside(self, bad: Path, problem: str, fallback: Path | None) -> None:
        """Move a damaged checkpoint out of the trainer's checkpoint-* rotation, with a one-line warning."""
        aside = bad.with_name(f"damaged-{bad.name}")
        n = 1
        while aside.exists():  # an earlier damaged copy of the same step keeps its name
            n += 1
            aside = bad.with_name(f"damaged-{bad.name}.{n}")
        if self.rank == 0:
            bad.rename(aside)
        print(f"rlft: WARNING {bad.name} is damaged ({problem}); moved it to {aside} and falling back to "
              f"{fallback.name if fallback else 'no checkpoint'}", file=sys.stderr)

    def _resolve_resume(self) -> Path | None:
        """The checkpoint to resume from; nothing in the run's logs changes until training starts (`step_begins`)."""
        self._check_config()
        all_dirs = sorted(self.run.checkpoints.glob("checkpoint-*"), key=checkpoint_step)
        good = self.run.complete_checkpoints()
        skipped = [p.name for p in all_dirs if p not in good]
        if skipped:
            print(f"rlft: ignoring incomplete checkpoint(s) {', '.join(skipped)} (a save was interrupted)", file=sys.stderr)
        return self._pick(good)

    def _pick(self, good: list[Path]) -> Path:
        """The newest of `good` (complete checkpoints, oldest first) that is not damaged, its rlft state loaded."""
        while good and (problem := checkpoint_problem(good[-1])):
            bad = good.pop()
            self._set_aside(bad, problem, good[-1] if good else None)
        if not good:
            if self.run.final.exists():
                raise RunError(f"nothing left to do: {self.run.root} holds a finished run (final/) and no checkpoint to continue from")
            raise RunError(f"no complete checkpoint to resume in {self.run.checkpoints}; start again with --overwrite")
        newest = good[-1]
        step = checkpoint_step(newest)
        target = self.cfg.train.max_steps
        total_steps = get_spec(self.cfg.stage).total_steps
        if total_steps is not None:  # e.g. PPO counts episodes; a step is one update of ppo.batch_size episodes
            target = total_steps(self.cfg)
        self.extra_state = read_rlft_state(newest)
        self.final_only = False
        if target > 0 and step >= target and not self.run.final.is_dir():
            # killed during the final save (final/ appears only by a rename once complete): do it again
            print(f"rlft: {self.run.root} reached step {step} but its final model was not saved completely; "
                  f"saving it again from {newest.name}", file=sys.stderr)
            self.final_only = True
            return newest
        if target > 0 and step >= target:
            raise RunError(f"nothing left to do: the newest checkpoint is at step {step} and train.max_steps is {target}; "
                           f"raise train.max_steps to train further")
        if self.rank == 0:
            print(f"rlft: resuming {self.run.root} from step {step} to step "
                  f"{target if target > 0 else 'the end of the data'}", file=sys.stderr)
        return newest

    def step_begins(self) -> None:
        """The first training step of this process begins: everything is loaded, so the resume now drops the
        logged rows of the steps it trains again and records a changed config. A resume that fails while
        loading leaves the run's files as they were."""
        if self.began:
            return
        self.began = True
        if self.resume_from is None or self.own_resume or self.rank != 0:
            return
        step = checkpoint_step(self.resume_from)
        for path in (self.run.metrics, self.run.completions, self.run.health, self.run.root / "reward_logs.jsonl"):
            drop_rows_after(path, step)
        if self.config_changes:  # the run goes on with the new values: record them
            self.run.config.rename(self.run.root / f"config.step-{step}.yaml")
            from rlft.config.render import render_yaml

            self.run.config.write_text(f"# rlft resolved config; each key notes the layer that set it\n"
                                       f"# changed at step {step} (--allow-config-change); before: "
                                       f"config.step-{step}.yaml\n{render_yaml(self.cfg, self.composed)}")

    # -- callbacks -----------------------------------------------------------------------------
    def callbacks(self) -> list:
        from rlft.monitor.callbacks import CheckpointMarker, InterruptCallback, StepBegins
        from rlft.monitor.console import ConsoleProgress
        from rlft.monitor.health import HealthMonitor
        from rlft.monitor.metrics import MetricsWriter

        self.console = ConsoleProgress(self.cfg.stage)
        self.health = HealthMonitor(self.cfg, self.run, self.console)
        extra = []
        if self.config_changes:
            from rlft.monitor.callbacks import ApplyConfigChanges

            extra.append(ApplyConfigChanges(self.config_changes))
        return [StepBegins(self), MetricsWriter(self.run.metrics, self.cfg.stage, self.console, self.health), self.console,
                InterruptCallback(self.interrupt), CheckpointMarker(self), self.health, *extra]

    def rlft_state(self, trainer) -> dict:
        """State rlft adds to each checkpoint (e.g. the adaptive KL coefficient)."""
        if hasattr(trainer, "rlft_state_dict"):  # the trainer knows its own (e.g. GRPO's KL controller state)
            state = dict(trainer.rlft_state_dict())
        else:
            state = {}
            kl_ctl = getattr(trainer, "kl_ctl", None)
            if kl_ctl is not None:
                state["kl_controller"] = kl_ctl.state_dict()
        if hasattr(trainer, "rlft_extra_state"):  # a trainer's own resumable state (e.g. PPO's eval.start)
            state["trainer"] = trainer.rlft_extra_state()
        return state

    def _state_problem(self, trainer) -> str | None:
        """Load the resumed checkpoint's rlft state into `trainer`; why it cannot be (a key this trainer writes is
        missing, or a value its loader refuses), or None."""
        missing = [k for k in self.rlft_state(trainer) if k not in self.extra_state]
        if missing:
            return f"{RLFT_STATE} lacks {', '.join(missing)}"
        try:
            self.load_rlft_state(trainer)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            return f"{RLFT_STATE} does not load ({type(exc).__name__}: {exc})"
        return None

    def _load_resume_state(self, trainer) -> None:
        """The rlft state of the checkpoint to resume; a damaged one is moved aside and the one before it tried,
        before anything is trained."""
        while self.resume_from is not None and (problem := self._state_problem(trainer)):
            bad = self.resume_from
            if self.own_resume:  # the stage chose it and dropped its rows: it chooses again on the next run
                self._set_aside(bad, problem, None)
                raise RunError(f"{bad.name} was damaged and is moved aside; run the same command again to resume "
                               f"from the checkpoint before it: {self.resume_command}")
            good = [p for p in self.run.complete_checkpoints() if p != bad]
            self._set_aside(bad, problem, good[-1] if good else None)
            self.resume_from = self._pick(good)

    def load_rlft_state(self, trainer) -> None:
        if not self.extra_state:
            return
        if hasattr(trainer, "load_rlft_state_dict"):
            trainer.load_rlft_state_dict(self.extra_state)
        else:
            kl_ctl = getattr(trainer, "kl_ctl", None)
            if kl_ctl is not None and "kl_controller" in self.extra_state:
                kl_ctl.load_state_dict(self.extra_state["kl_controller"])
        if hasattr(trainer, "load_rlft_extra_state") and "trainer" in self.extra_state:
            trainer.load_rlft_extra_state(self.extra_state["trainer"])
        self._apply_kl_changes(trainer)

    def _apply_kl_changes(self, trainer) -> None:
        """--allow-config-change: a changed KL setting wins over the controller state in the checkpoint."""
        kl_ctl, section = getattr(trainer, "kl_ctl", None), get_spec(self.cfg.stage).section
        if kl_ctl is None:
            return
        for key, attr in (("kl_penalty_coef", "value"), ("init_kl_coef", "value"), ("target_kl", "target"),
                          ("kl_horizon", "horizon")):
            if f"{section}.{key}" in self.config_changes and hasattr(kl_ctl, attr):
                setattr(kl_ctl, attr, float(self.config_changes[f"{section}.{key}"][1]))

    # -- training ------------------------------------------------------------------------------
    def train(self, trainer, tokenizer, *, final: bool = True) -> int:
        """Train to the end; `final=False` (an intermediate round) leaves final/ unwritten."""
        try:
            self.exit_code = self._train(trainer, tokenizer, final)
        finally:
            self.steps = trainer.state.global_step
            self.max_steps = trainer.state.max_steps or None  # known once training started
        return self.exit_code

    def _train(self, trainer, tokenizer, final: bool = True) -> int:
        from rlft.monitor.health import RunStopped
        from rlft.rewards import RewardFailureError

        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # rlft prints its own line per logged step
        self.trainer = trainer
        self.health.attach(trainer, self)
        if self.resume_from is not None:
            self._load_resume_state(trainer)
        else:
            self.load_rlft_state(trainer)
        if self.final_only:
            from transformers import TrainerState

            trainer._load_from_checkpoint(str(self.resume_from))  # the weights only; nothing left to train
            trainer.state = TrainerState.load_from_json(str(self.resume_from / "trainer_state.json"))
            self.console.close()
            self.save_final(trainer, tokenizer)
            return 0
        try:
            trainer.train(resume_from_checkpoint=str(self.resume_from) if self.resume_from else None)
        except RunStopped as exc:
            self._save_now(trainer)
            print(f"rlft: stopped by health rule: {exc}. A checkpoint was written; after fixing the cause, "
                  f"resume with: {self.resume_command}", file=sys.stderr)
            return 4
        except RewardFailureError as exc:
            self._save_now(trainer)
            print(f"rlft: stopped: {exc} A checkpoint was written; fix the rewards and resume with: "
                  f"{self.resume_command}", file=sys.stderr)
            return 4
        except KeyboardInterrupt:
            good = self.run.complete_checkpoints() if self.rank == 0 else []
            if good:
                print(f"rlft: interrupted twice: stopped at once, without a new checkpoint. {good[-1]} "
                      f"(step {checkpoint_step(good[-1])}) is still there; resume from it with: {self.resume_command}",
                      file=sys.stderr)
            elif self.rank == 0:
                print(f"rlft: interrupted twice: stopped at once; no checkpoint had been written yet, so start "
                      f"again (add --overwrite to replace {self.run.root})", file=sys.stderr)
            return 130
        finally:
            self.console.close()
        if self.interrupt.signal is not None:
            step = trainer.state.global_step
            print(f"rlft: interrupted at step {step}; checkpoint written to {trainer.args.output_dir}. "
                  f"Resume with: {self.resume_command}", file=sys.stderr)
            return 130  # Ctrl-C's code for SIGTERM too: one "interrupted, resumable" code
        self.check_ranks_in_sync(trainer)
        if final:
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
        path = Path(trainer.args.output_dir) / f"checkpoint-{trainer.state.global_step}"
        if path.is_dir():
            (path / RLFT_STATE).write_text(json.dumps(self.rlft_state(trainer)))
            (path / COMPLETE_MARKER).write_text("ok\n")
            self.run.drop_replaced()

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
        import shutil

        tmp = self.run.root / "final.tmp"
        if trainer.args.should_save and tmp.exists():
            shutil.rmtree(tmp)  # left by a save that was killed half-way
        trainer.save_model(str(tmp))
        if trainer.args.should_save:
            tokenizer.save_pretrained(str(tmp))
            self.describe_final(tmp, trainer.state.global_step)
            if self.run.final.exists():
                shutil.rmtree(self.run.final)
            tmp.rename(self.run.final)
            self.run.drop_replaced()
            print(f"rlft: done at step {trainer.state.global_step}; final model in {self.run.final}", file=sys.stderr)
