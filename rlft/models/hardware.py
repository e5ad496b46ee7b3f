"""rlft's train.* and hw.* keys mapped once onto transformers/TRL training arguments, for every stage.

TRL configs default to bf16=True, which fails on a CPU, so precision is always passed explicitly.
"""

from __future__ import annotations

from rlft.config.schema import RlftConfig


def common_training_args(cfg: RlftConfig, output_dir: str) -> dict:
    """Keyword arguments shared by every TRL trainer config (a transformers TrainingArguments)."""
    t, hw = cfg.train, cfg.hw
    cuda = hw.device == "cuda"
    args = dict(
        output_dir=output_dir,
        learning_rate=t.learning_rate,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        num_train_epochs=t.num_train_epochs,
        max_steps=t.max_steps,
        lr_scheduler_type=t.lr_scheduler_type,
        warmup_steps=t.warmup_ratio,  # transformers 5: a float below 1 is a fraction of all steps
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        # the fused optimizer exists only for CUDA tensors
        optim=t.optim if cuda or t.optim != "adamw_torch_fused" else "adamw_torch",
        bf16=bool(t.bf16),
        fp16=bool(t.fp16),
        # multi-process: the launcher signals each rank's whole process group on Ctrl-C/SIGTERM, and a DataLoader
        # worker dies on a SIGTERM its parent did not send, failing the rank instead of letting it checkpoint
        dataloader_num_workers=0 if hw.num_processes * hw.num_machines > 1 else t.dataloader_num_workers,
        seed=t.seed,
        data_seed=t.seed,
        logging_steps=t.logging_steps,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        report_to=available_trackers(t.report_to) or "none",
        use_cpu=hw.device == "cpu",
        disable_tqdm=True,  # rlft draws its own progress bar
        logging_first_step=True,
    )
    if t.tf32 is not None and cuda:
        args["tf32"] = bool(t.tf32)
    # transformers 5 renamed gradient_checkpointing to activation_checkpointing (the old name warns)
    ckpt = "activation_checkpointing" if _has_field("activation_checkpointing") else "gradient_checkpointing"
    args[ckpt] = bool(t.gradient_checkpointing)
    if t.gradient_checkpointing:
        args[f"{ckpt}_kwargs"] = {"use_reentrant": False}
    if hw.distributed_strategy == "ddp":
        args["ddp_find_unused_parameters"] = hw.ddp_find_unused_parameters
        args["ddp_bucket_cap_mb"] = hw.ddp_bucket_cap_mb
    if hw.empty_cache_steps:
        args["torch_empty_cache_steps"] = hw.empty_cache_steps
    return args


def _has_field(name: str) -> bool:
    from transformers import TrainingArguments

    return name in TrainingArguments.__dataclass_fields__


def available_trackers(names: list[str]) -> list[str]:
    """Trackers from train.report_to that are installed; the others are skipped with a warning
    (tensorboard and wandb are optional, and a missing one should not end a run)."""
    import importlib.util
    import logging

    modules = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "comet_ml": "comet_ml",
               "trackio": "trackio"}
    out = []
    for name in names:
        if importlib.util.find_spec(modules.get(name, name)) is None:
            logging.getLogger("rlft").warning("train.report_to: %s is not installed; skipped (pip install "
                                              "%s)", name, name)
        else:
            out.append(name)
    return out


def resolve_cpu_threads(setting, local_processes: int = 1, *, affinity=None, loadavg=None,
                        cpu_count=None) -> tuple[int | None, str, str | None]:
    """`hw.cpu_threads` as (threads or None for torch's default, start-line phrase, warning or None).

    `auto` takes the cores this process may run on (os.sched_getaffinity, not the machine's count, which
    containers and taskset narrow) shared among the processes on this machine. Threads beyond the cores
    that are free make each step many times slower (spin-waiting threads), so a load average that leaves
    fewer free cores than threads is a warning."""
    import os

    if setting is None:
        return None, "cpu threads: torch default", None
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if setting == "auto":
        threads = max(1, affinity // max(1, local_processes))
        share = f" / {local_processes} processes" if local_processes > 1 else ""
        note = f"cpu threads {threads} (auto: {affinity} usable cores{share})"
    else:
        threads = int(setting)
        note = f"cpu threads {threads} (hw.cpu_threads)"
    if loadavg is None:
        try:
            loadavg = os.getloadavg()[0]
        except OSError:
            loadavg = 0.0
    total = cpu_count or os.cpu_count() or affinity
    free = min(affinity, total - loadavg)
    warning = None
    if threads * local_processes > max(free, 0) + 0.5:
        fits = max(1, int(max(free, 0)) // max(1, local_processes))
        fix = f"set hw.cpu_threads={fits} or run" if fits < threads else "run"
        warning = (f"the machine is busy (load average {loadavg:.1f} on {total} cores, about {max(free, 0):.1f} free): "
                   f"{threads * local_processes} cpu thread(s) will compete with other processes and steps can be many "
                   f"times slower; {fix} when the machine is idle")
    return threads, note, warning
