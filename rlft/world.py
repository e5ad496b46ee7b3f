"""This process's place in a launched group, read from the environment the launcher (`accelerate launch`, torchrun)
sets: the one reader of RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE. Read at each call, never cached, so a
value set later (a test, vLLM's defaults below) is seen."""

from __future__ import annotations

import os


def rank() -> int:
    """This process's rank in the group (0 when not launched as one)."""
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """Whether this is the process that speaks for the group (rank 0, or the only one)."""
    return os.environ.get("RANK", "0") == "0"


def world_size() -> int:
    """How many processes the group has (1 when not launched as one)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    """This process's rank on its machine: the index of the GPU it uses."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_world_size() -> int:
    """How many processes of the group run on this machine."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def default_to_one_process() -> None:
    """Where no launcher set them, the variables torch.distributed's rendezvous reads, as for a group of one (an
    in-process vLLM engine starts one)."""
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(k, v)
