"""Hardware at `rlft train` start: `--hw auto`, preflight checks before any model is loaded, and
re-launching rlft itself under `accelerate launch` for the multi-process profiles (the run folder is made and
locked here, once, before the processes start)."""

from __future__ import annotations

import os
import sys

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.runtime.sharding import CPU_FSDP_ENV

LAUNCHED_ENV = "RLFT_LAUNCHED"  # set in the processes `accelerate launch` starts for us
TIMED_OUT = -1  # run_forwarding_signals: the processes were stopped for not joining in time


def detect_hw() -> tuple[str, str]:
    """(profile, reason) from what torch can see."""
    import torch

    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        name = torch.cuda.get_device_name(0)
        if n > 1:
            return "ddp", f"{n} CUDA devices visible ({name})"
        if any(k in name for k in ("A100", "H100", "H200", "A800", "H800", "L40")):
            return "a100", f"one {name}"
        return "rtx4090", f"one {name}"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps", "Apple MPS available"
    return "cpu", "no CUDA or MPS device visible"


def guess_hw() -> tuple[str, str]:
    """(profile, reason) for `--hw auto` in validate-config / show-config, without importing torch: NVIDIA GPUs
    from /proc/driver/nvidia (and CUDA_VISIBLE_DEVICES), Apple MPS from the platform. `train` asks torch."""
    import platform
    from pathlib import Path

    gpus_dir = Path("/proc/driver/nvidia/gpus")
    found = sorted(gpus_dir.iterdir()) if gpus_dir.is_dir() else []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        found = found[:len(wanted)]
    if found:
        name = "an NVIDIA GPU"
        try:
            for line in (found[0] / "information").read_text().splitlines():
                if line.startswith("Model:"):
                    name = line.split(":", 1)[1].strip()
        except OSError:
            pass
        if len(found) > 1:
            return "ddp", f"{len(found)} NVIDIA GPUs listed in {gpus_dir} ({name})"
        if any(k in name for k in ("A100", "H100", "H200", "A800", "H800", "L40")):
            return "a100", f"one {name} listed in {gpus_dir}"
        return "rtx4090", f"one {name} listed in {gpus_dir}"
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return "mps", "Apple silicon (MPS)"
    why = "no NVIDIA GPU listed in /proc/driver/nvidia" + (" (CUDA_VISIBLE_DEVICES hides them)" if visible is not None
                                                           and gpus_dir.is_dir() and any(gpus_dir.iterdir()) else "")
    return "cpu", why + " and not Apple silicon"


def preflight(cfg: RlftConfig, hw_name: str) -> list[str]:
    """Problems that would make training fail on this machine, each with its fix."""
    import torch

    problems = []
    hw = cfg.hw
    if hw.device == "cuda":
        if not torch.cuda.is_available():
            problems.append(f"profile `{hw_name}` needs an NVIDIA GPU with CUDA and none is visible here; "
                            f"use --hw cpu (or --hw auto)")
        else:
            n = torch.cuda.device_count()
            if hw.num_processes > n:
                problems.append(f"hw.num_processes={hw.num_processes} but only {n} GPU(s) are visible; "
                                f"set hw.num_processes={n}")
            if cfg.train.bf16 and not torch.cuda.is_bf16_supported():
                problems.append("this GPU does not support bf16; set train.bf16=false train.fp16=true")
    if hw.device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            problems.append(f"profile `{hw_name}` needs Apple MPS, which is not available here; use --hw cpu")
    if hw.distributed_strategy == "deepspeed":
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            problems.append("hw.distributed_strategy=deepspeed needs `pip install deepspeed`")
    return problems


def needs_launch(cfg: RlftConfig) -> bool:
    multi = cfg.hw.num_processes > 1 or cfg.hw.num_machines > 1
    return multi and cfg.hw.distributed_strategy != "none" and not os.environ.get(LAUNCHED_ENV)


def accelerate_command(cfg: RlftConfig, argv: list[str]) -> list[str]:
    """`accelerate launch` re-running this same rlft command in hw.num_processes processes."""
    hw, t = cfg.hw, cfg.train
    cmd = [sys.executable, "-m", "accelerate.commands.launch",
           "--num_processes", str(hw.num_processes * hw.num_machines),
           "--num_machines", str(hw.num_machines), "--machine_rank", str(hw.machine_rank),
           "--main_process_port", str(hw.main_process_port),
           "--mixed_precision", "bf16" if t.bf16 else "fp16" if t.fp16 else "no",
           "--dynamo_backend", "no"]
    if hw.main_process_ip:
        cmd += ["--main_process_ip", hw.main_process_ip]
    if hw.num_machines > 1:  # torchrun's wait for the other machines, bounded as rlft's own wait is
        cmd += ["--rdzv_conf", f"timeout={hw.rendezvous_timeout_s}"]
    if hw.distributed_strategy == "fsdp":
        # FSDP2 (accelerate's default is FSDP1); FULL_SHARD frees the gathered layer after its forward,
        # SHARD_GRAD_OP keeps it until the backward (FSDP2's reshard_after_forward=False)
        cmd += ["--use_fsdp", "--fsdp_version", "2",
                "--fsdp_reshard_after_forward", str(hw.fsdp_sharding_strategy == "FULL_SHARD").lower(),
                "--fsdp_auto_wrap_policy", hw.fsdp_auto_wrap_policy,
                # a LoRA run's checkpoints are small: rank 0 gathers and writes them (no shared filesystem needed);
                # full fine-tuning writes each rank's shard (every rank needs the run folder: a shared filesystem)
                "--fsdp_state_dict_type", "FULL_STATE_DICT" if cfg.lora.enabled else "SHARDED_STATE_DICT",
                "--fsdp_cpu_ram_efficient_loading", "false",
                "--fsdp_offload_params", str(hw.fsdp_offload_params).lower()]
    elif hw.distributed_strategy == "deepspeed":
        cmd += ["--use_deepspeed", "--zero_stage", str(hw.deepspeed_zero_stage or 2)]
    else:
        # on CPU too: `--cpu --num_processes 2` silently runs one process, `--multi_gpu` runs real DDP over gloo
        cmd += ["--multi_gpu"]
    return cmd + ["-m", "rlft.cli", *argv]


def launch(cfg: RlftConfig, argv: list[str]) -> int:
    import tempfile
    from pathlib import Path

    from rlft.runtime.ranks import JOINED, LAUNCH_DIR_ENV, launched_exit_code

    hw = cfg.hw
    if hw.num_machines > 1:
        problem = main_address_problem(hw.main_process_ip)
        if problem:
            print(f"rlft: {problem}", file=sys.stderr)
            return 3
    cmd = accelerate_command(cfg, argv)
    if hw.num_machines == 1 and not port_is_free(hw.main_process_port):  # another run on this machine holds it
        port = free_port()
        cmd[cmd.index("--main_process_port") + 1] = str(port)
        print(f"rlft: hw.main_process_port {hw.main_process_port} is in use on this machine; using {port}",
              file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="rlft-launch-") as tmp:
        env = {**os.environ, LAUNCHED_ENV: "1", LAUNCH_DIR_ENV: tmp}
        if hw.device == "cpu":
            env.setdefault("OMP_NUM_THREADS", "1")
            if hw.distributed_strategy == "fsdp":  # rlft engages FSDP2 itself where accelerate would not
                env[CPU_FSDP_ENV] = "1"
        print(f"rlft: launching {hw.num_processes * hw.num_machines} processes "
              f"({hw.distributed_strategy}) with accelerate", file=sys.stderr, flush=True)
        code, joined = run_forwarding_signals(cmd, env, Path(tmp) / JOINED, hw.rendezvous_timeout_s)
        if code != TIMED_OUT:
            code = launched_exit_code(tmp, code)
    if not joined and code != TIMED_OUT:  # they stopped on their own, before the group formed
        print(f"rlft: the processes stopped (exit {code}) before they all joined the run; the errors above say why",
              file=sys.stderr)
        return code
    if not joined:
        where = (f"{hw.main_process_ip}:{hw.main_process_port}" if hw.num_machines > 1
                 else f"port {hw.main_process_port} on this machine")
        print(f"rlft: the {hw.num_processes * hw.num_machines} processes did not all join the run within "
              f"hw.rendezvous_timeout_s={hw.rendezvous_timeout_s} s (main address {where}). Start every machine with "
              f"the same command and its own hw.machine_rank (0..{hw.num_machines - 1}), set hw.main_process_ip to "
              f"machine 0's address as the others reach it, and open hw.main_process_port", file=sys.stderr)
        return 3
    return code


def port_is_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def main_address_problem(ip: str | None) -> str | None:
    """Multi-machine runs need machine 0's address, and it must resolve here (checked before anything starts)."""
    import socket

    if not ip:
        return "hw.num_machines > 1 needs hw.main_process_ip: the address of machine 0 (hw.machine_rank=0)"
    try:
        socket.getaddrinfo(ip, None)
    except OSError as exc:
        return f"hw.main_process_ip={ip} does not resolve on this machine ({exc.strerror or exc})"
    return None


def run_forwarding_signals(cmd: list[str], env: dict, formed, timeout_s: float) -> tuple[int, bool]:
    """Run the launcher in a session of its own; (its exit code, whether every process joined the run).

    Each SIGINT/SIGTERM this process gets goes to the launcher once: it sends it to every rank, and each
    finishes its step and writes the checkpoint (a Ctrl-C or a scheduler's SIGTERM to this process would
    otherwise kill the launcher mid-step, or reach the ranks twice). The ranks touch `formed` once the
    process group has formed; if that has not happened within `timeout_s` the launcher is stopped rather than
    left waiting on a machine that never comes."""
    import signal
    import subprocess
    import time

    child = subprocess.Popen(cmd, env=env, start_new_session=True)

    def forward(signum, frame):
        if child.poll() is None:
            child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    started = time.monotonic()
    try:
        while True:
            try:
                code = child.wait(timeout=0.5)
                return code, formed.exists()
            except subprocess.TimeoutExpired:
                pass
            if not formed.exists() and time.monotonic() - started > timeout_s:
                _stop(child)
                return TIMED_OUT, False
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _stop(child) -> None:
    """The launcher and every rank it started (they share its session's process group)."""
    import signal
    import subprocess

    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def forget_unstarted(run) -> None:
    """A new run whose processes failed before writing anything: remove what this process created for it (its
    marker, config.yaml, the empty checkpoints folder), so the corrected command runs again as it is."""
    from rlft.rundir.markers import MARKER
    from rlft import run_files
    from rlft.rundir.lock import LOCK_NAME

    made = {MARKER, run_files.CONFIG, run_files.CHECKPOINTS, LOCK_NAME}
    names = {p.name for p in run.root.iterdir()}
    if not names <= made or any(run.checkpoints.iterdir()):
        return
    for name in names - {"checkpoints", LOCK_NAME}:
        (run.root / name).unlink()
    run.checkpoints.rmdir()


def replace_hw(argv: list[str], hw: str) -> list[str]:
    """The command's arguments with `--hw` set to the profile this process resolved (`auto` is resolved once)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--hw":
            out += ["--hw", hw]
            skip = True
        elif a.startswith("--hw="):
            out.append(f"--hw={hw}")
        else:
            out.append(a)
    return out


def relaunch(cfg: RlftConfig, composed: Composed, opts, hw: str, argv: list[str]) -> int:
    """This `rlft train` command (`argv`) again in hw.num_processes processes: the run folder is created and locked
    here, before they start, and pinned in their arguments (--overwrite is done once, here)."""
    from rlft.rundir.prepare import prepare_run_dir

    if cfg.hw.machine_rank > 0:  # machine 0 owns the run folder (on a shared filesystem it is this one too)
        return launch(cfg, replace_hw([a for a in argv if a != "--overwrite"], hw))
    run = prepare_run_dir(cfg, composed, opts)  # holds the lock while the processes run
    argv = replace_hw([a for a in argv if a != "--overwrite"], hw) + [f"train.output_dir={run.root}"]
    try:
        code = launch(cfg, argv)
        if code in (2, 3) and not opts.resume and run.replaced is None:  # refused before any rank began
            forget_unstarted(run)
        return code
    finally:
        if run.replaced is not None:
            print(f"rlft: the run replaced by --overwrite is kept at {run.replaced} (this run wrote no checkpoint); "
                  f"move it back or delete it", file=sys.stderr)
        run.release()
