"""Process set-up for a run: library logs quieted, trackers' files sent into the run folder, CPU threads, seed."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

from rlft import world
from rlft.config.schema import RlftConfig


def quiet_libraries(verbose: bool) -> None:
    """Libraries print a lot by default; rlft shows its own progress and metrics instead (-v restores them)."""
    if verbose:
        logging.basicConfig(level=logging.INFO)
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # read when vLLM is imported (grpo.generation_backend vllm)
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if "datasets" in sys.modules:  # imported already (rlft called in-process): too late for the variable above
        sys.modules["datasets"].disable_progress_bars()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("transformers", "trl", "peft", "datasets", "accelerate", "torch", "vllm"):
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


def set_up_process(cfg: RlftConfig, rank: int) -> str:
    """CPU threads (hw.cpu_threads, shared among this machine's processes) and the seed; returns the threads note
    (rank 0 prints it)."""
    from rlft.models.hardware import resolve_cpu_threads

    local = world.local_world_size()
    threads, note, warning = resolve_cpu_threads(cfg.hw.cpu_threads, local)
    if threads:
        import torch

        torch.set_num_threads(threads)
    if rank == 0:
        print(f"rlft: {note}", file=sys.stderr)
        if warning:
            print(f"rlft: WARNING {warning}", file=sys.stderr)
    from transformers import set_seed

    set_seed(cfg.train.seed)
    return note
