"""Whether a checkpoint's optimizer.pt fits the model a resume trains, checked before the first step.

torch's `Optimizer.load_state_dict` refuses only a different number of groups or of parameters in a group, deep in
the trainer's resume; a state whose tensors have other shapes (a LoRA rank changed, a hand-edited file) loads and
fails at the first optimizer step. rlft compares the file with the parameters the trainer's optimizer will hold,
grouped as transformers' `Trainer.create_optimizer` groups them, before anything is trained."""

from __future__ import annotations

from pathlib import Path

OPTIMIZER = "optimizer.pt"
SCHEDULER = "scheduler.pt"


def _expected_groups(trainer) -> list[list[tuple[str, tuple[int, ...]]]] | None:
    """(name, shape) of each parameter the trainer's optimizer holds, group by group; None when rlft cannot tell
    without building it (a layer-wise, factory or sharded optimizer): then nothing is checked."""
    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return None
    model = trainer.model
    names = {id(p): n for n, p in model.named_parameters()}
    if trainer.optimizer is not None:  # an optimizer passed in or already built: its own groups
        return [[(names.get(id(p), "?"), tuple(p.shape)) for p in g["params"]] for g in trainer.optimizer.param_groups]
    if getattr(trainer, "optimizer_cls_and_kwargs", None) is not None:
        return None
    from transformers.trainer import is_optimizer_factory

    cls, kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, model)
    if is_optimizer_factory(cls) or {"params", "model", "optimizer_dict"} & set(kwargs):
        return None
    decay = set(trainer.get_decay_parameter_names(model))
    trained = [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]
    return [[(n, s) for n, s in trained if n in decay], [(n, s) for n, s in trained if n not in decay]]


def _counts(groups: list[list]) -> str:
    return f"{len(groups)} group(s) of {' + '.join(str(len(g)) for g in groups) or '0'} parameter(s)"


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def optimizer_mismatch(trainer, checkpoint: Path) -> str | None:
    """What in `checkpoint`'s optimizer.pt does not fit `trainer`'s model (the number of parameter groups, of
    parameters in a group, or a state tensor's shape), or None: it fits, or the trainer will not load it (no
    optimizer.pt and scheduler.pt pair), or its layout is not the plain one torch writes. The file is
    memory-mapped: its tensors are not read. Call after `checkpoint_files.checkpoint_problem` found it whole."""
    path = Path(checkpoint) / OPTIMIZER
    if not path.is_file() or not (Path(checkpoint) / SCHEDULER).is_file():
        return None
    expected = _expected_groups(trainer)
    if expected is None:
        return None
    import torch

    saved = torch.load(path, weights_only=True, mmap=True, map_location="cpu")
    groups = [g["params"] for g in saved["param_groups"]]
    if not all(isinstance(i, int) and not isinstance(i, bool) for g in groups for i in g):
        return None  # keyed by name (a sharded save): not the layout compared here
    if [len(g) for g in groups] != [len(g) for g in expected]:
        return f"it holds {_counts(groups)}; this model trains {_counts(expected)}"
    state = saved["state"]
    for ids, wanted in zip(groups, expected):
        for i, (name, shape) in zip(ids, wanted):
            entry = state.get(i)
            if not isinstance(entry, dict):
                continue  # a parameter that has not stepped yet has no state
            for key, value in entry.items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and tuple(value.shape) != shape:
                    return (f"the {key} of parameter {i} ({name}) has shape {_shape(tuple(value.shape))}; "
                            f"this model's is {_shape(shape)}")
    return None
