"""Multi-process DDP runs end with every rank holding the same trainable weights (DDP all-reduces gradients); rank 0
records each rank's checksum in distributed.json. Under FSDP each rank holds its own shard, so there is
nothing to compare."""

from __future__ import annotations

import json
import sys

from rlft import world
from rlft.rundir.folder import RunDir
from rlft.runtime.sharding import is_fsdp
from rlft import run_files


def check_ranks_in_sync(trainer, run: RunDir) -> None:
    acc = trainer.accelerator
    if acc.num_processes < 2:
        return
    import torch

    model = acc.unwrap_model(trainer.model)
    if is_fsdp(acc):
        return
    total = sum(p.detach().double().sum() for p in model.parameters() if p.requires_grad)
    sums = acc.gather(torch.as_tensor(total, device=acc.device).reshape(1)).tolist()
    if acc.is_main_process:
        in_sync = max(sums) - min(sums) <= 1e-9 * max(1.0, abs(sums[0]))
        (run.root / run_files.DISTRIBUTED).write_text(json.dumps(
            {"num_processes": acc.num_processes, "param_checksums": sums, "in_sync": in_sync}))
        if not in_sync:
            print(f"rlft: WARNING ranks diverged: trainable-parameter checksums {sums}", file=sys.stderr)


LAUNCH_DIR_ENV = "RLFT_LAUNCH_DIR"  # a folder the launcher watches: `joined` once the group formed, `exit-<rank>`
JOINED = "joined"
# keys that differ between the machines of one run by design
PER_MACHINE_KEYS = ("hw.machine_rank", "train.output_dir")


def run_fingerprint(cfg) -> str:
    """A hash of the resolved config, less the keys each machine sets for itself."""
    import dataclasses
    import hashlib

    data = dataclasses.asdict(cfg)
    for key in PER_MACHINE_KEYS:
        section, name = key.split(".")
        data.get(section, {}).pop(name, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]


def check_same_run(cfg) -> None:
    """Every rank runs the same rlft and the same config as rank 0, or the run stops (exit 3) naming the
    machines that differ. Also forms the process group, the first collective of the run."""
    import os
    import socket

    if world.world_size() < 2:
        return
    import torch.distributed as dist
    from accelerate import PartialState

    import rlft
    from rlft.errors import RunError

    PartialState(cpu=cfg.hw.device == "cpu")
    mine = {"machine": cfg.hw.machine_rank, "host": socket.gethostname(), "version": rlft.__version__,
            "config": run_fingerprint(cfg)}
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    launch_dir = os.environ.get(LAUNCH_DIR_ENV)
    if launch_dir:  # every process joined: the launcher stops waiting for late machines
        from pathlib import Path

        (Path(launch_dir) / JOINED).touch()
    first = everyone[0]
    odd = [(rank, e) for rank, e in enumerate(everyone) if (e["version"], e["config"]) != (first["version"],
                                                                                          first["config"])]
    if odd:
        rank, e = odd[0]
        what = (f"rlft {e['version']} where rank 0 runs {first['version']}" if e["version"] != first["version"]
                else f"config {e['config']} where rank 0 has {first['config']} (a different file or override)")
        raise RunError(f"rank {rank} (machine {e['machine']}, {e['host']}) runs {what}; start every machine with "
                       f"the same rlft and the same command, changing only hw.machine_rank", exit_code=3)


def record_exit(code) -> None:
    """In a process the launcher started: leave this rank's exit code for it (torchrun reports 1 for any)."""
    import os
    from pathlib import Path

    launch_dir = os.environ.get(LAUNCH_DIR_ENV)
    if launch_dir and Path(launch_dir).is_dir():
        rank = world.rank()
        try:
            (Path(launch_dir) / f"exit-{rank}").write_text(str(code if isinstance(code, int) else 1))
        except OSError:
            pass


def launched_exit_code(launch_dir, code: int) -> int:
    """The run's exit code from the ranks' own (rank 0's first), where torchrun reports only that one failed."""
    from pathlib import Path

    if code == 0:
        return 0
    found = {}
    for path in Path(launch_dir).glob("exit-*"):
        try:
            found[int(path.name.removeprefix("exit-"))] = int(path.read_text())
        except ValueError:
            continue
    failed = [found[r] for r in sorted(found) if found[r] != 0]
    return failed[0] if failed else code


def leave_process_group() -> None:
    """Tear the process group down before the interpreter exits: left to interpreter shutdown, gloo's threads can
    be destroyed while still joinable, and the rank aborts ("terminate called without an active exception")
    after a run that finished."""
    import sys

    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # never turn a finished run into a failure on the way out
        pass


def exit_rank(code) -> None:
    """How a process the launcher started ends: the process group torn down, its exit code left for the
    launcher, Python's exit handlers run (trackers flush), then out without the C++ static destructors, which
    abort a finished run now and then on CPU ("terminate called without an active exception" in a gloo thread)."""
    import atexit
    import logging
    import os
    import sys

    leave_process_group()
    code = code if isinstance(code, int) else (0 if code is None else 1)
    record_exit(code)
    try:
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
