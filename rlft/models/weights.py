"""Loading a causal LM's weights from a folder or hub id, in the run's dtype, and a checkpoint's weights into a
model that is already built (the lowest model layer: the policy, reference, init_from, resume and rollback
loaders build on it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlft.config.schema import RlftConfig

if TYPE_CHECKING:
    from rlft.config.load_plan import LoadPlan

DTYPES = {"auto": "auto", "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


class ModelLoadError(Exception):
    """The model or tokenizer cannot be loaded; the message is one line naming it and the fix."""


def model_path(name: str, tiny_init_std: float) -> str:
    """`tiny` is rlft's built-in model, built once into the cache; anything else passes through."""
    if name == "tiny":
        from rlft.tiny import ensure_tiny_model

        return str(ensure_tiny_model(init_std=tiny_init_std))
    return name


def resolve_model_path(cfg: RlftConfig) -> str:
    return model_path(cfg.model.name_or_path, cfg.model.tiny_init_std)


def torch_dtype(cfg: RlftConfig):
    import torch

    from rlft.config.load_plan import weights_dtype

    return getattr(torch, weights_dtype(cfg))


def damaged_weights(folder: str | Path) -> str | None:
    """What is wrong with the first weights file of a local `folder` that does not read (cut short, overwritten):
    a `*.safetensors` whose header or size safetensors refuses, or a `*.bin` (torch's zip format) whose archive
    does not open or whose members fail their checksums, as `FILE: why`; None when every one reads (or the folder
    is no local one). Called after a load failed, so reading a `.bin` through once costs nothing extra."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    from safetensors import safe_open

    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), "np"):  # header and coverage only: no tensor is read
                pass
        except Exception as exc:  # safetensors raises its own SafetensorError (and OSError for unreadable files)
            text = " ".join(str(exc).split()) or type(exc).__name__
            return f"{file}: {text}"
    for file in sorted(folder.glob("*.bin")):
        if (problem := _damaged_zip(file)) is not None:
            return f"{file}: {problem}"
    return None


def _damaged_zip(file: Path) -> str | None:
    """Why a torch-saved `.bin` (a zip archive since torch 1.6) does not read, or None."""
    import zipfile

    try:
        with zipfile.ZipFile(file) as archive:
            bad = archive.testzip()  # every member's CRC: catches bytes overwritten in the middle
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None if bad is None else f"member {bad} fails its checksum"


def _damaged(path: str | Path, exc: BaseException, what: str = "model") -> ModelLoadError | None:
    """The one-line ModelLoadError for a failed load from `path` whose weights files are damaged, or None."""
    problem = damaged_weights(path)
    if problem is None:
        return None
    return ModelLoadError(f"cannot load the {what} in {path}: weights file {problem} (damaged or cut short; "
                          f"{type(exc).__name__}). Copy or download it again, or save the {what} again")


def pretrained_causal_lm(path: str, dtype, trust_remote_code: bool = False):
    """The causal LM saved in a folder (or a hub id), in `dtype` (a torch dtype); a folder whose weights files are
    damaged is one ModelLoadError naming the file."""
    from transformers import AutoModelForCausalLM

    return pretrained(AutoModelForCausalLM, path, dtype=dtype, trust_remote_code=trust_remote_code)


def pretrained(auto_class, path: str, **kwargs):
    """`auto_class.from_pretrained(path, **kwargs)`; a folder whose weights files are damaged is one ModelLoadError
    naming the file."""
    try:
        return auto_class.from_pretrained(path, **kwargs)
    except Exception as exc:
        damaged = _damaged(path, exc)
        if damaged is None:
            raise
        raise damaged from None


def load_causal_lm(path: str, cfg: RlftConfig):
    return pretrained_causal_lm(path, torch_dtype(cfg), cfg.model.trust_remote_code)


def planned_causal_lm(path: str, plan: LoadPlan):
    """The causal LM at `path` in the plan's dtype (rlft.config.load_plan)."""
    import torch

    return pretrained_causal_lm(path, getattr(torch, plan.dtype), plan.trust_remote_code)


def load_adapter(model, folder: str | Path, *, trainable: bool = False):
    """A PEFT adapter folder on `model` (a new PeftModel; `trainable` to train it further)."""
    from peft import PeftModel

    try:
        return PeftModel.from_pretrained(model, str(folder), is_trainable=trainable)
    except Exception as exc:
        damaged = _damaged(folder, exc, "adapter")
        if damaged is None:
            raise
        raise damaged from None


def load_weights_into(model, folder: str | Path) -> None:
    """A checkpoint's trained weights into `model` as it stands (resume, rollback, the next round): its LoRA
    adapter (adapter_model.safetensors) into a PEFT model, else its full weights (model.safetensors; a key the
    file lacks keeps its value)."""
    from safetensors.torch import load_file

    adapter = Path(folder) / "adapter_model.safetensors"
    if adapter.is_file():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(str(adapter)))
    else:
        model.load_state_dict(load_file(str(Path(folder) / "model.safetensors")), strict=False)
