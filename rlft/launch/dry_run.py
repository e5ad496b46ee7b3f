"""`rlft train --dry-run`: the commands `rlft train` would start for the resolved config, printed instead of run,
and with a `slurm:` section the batch script that runs them on a SLURM allocation (one task per node, each
running `accelerate launch` with its node's rank).

The commands come from rlft.launch.processes' own `accelerate_command` and `replace_hw`, so what is printed is
what the launcher runs. Nothing here imports torch or accelerate, and nothing is written except the SLURM script (in the
run folder, created and marked for the run when it is new)."""

from __future__ import annotations

import copy
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from rlft import run_files
from rlft.config.schema import RlftConfig
from rlft.config.validate import CONTROL
from rlft.rundir.markers import MARKER, mark, read_marker
from rlft.launch.processes import LAUNCHED_ENV, accelerate_command, replace_hw
from rlft.rundir.folder import RUN_KIND, is_run_folder
from rlft.errors import RunError
from rlft.rundir.options import RunOptions
from rlft.rundir.prepare import check_run_dir, check_writable, default_output_dir, find_run_to_resume
from rlft.runtime.sharding import CPU_FSDP_ENV

SBATCH_NAME = run_files.LAUNCH_SBATCH
# stand-ins for the values each SLURM task fills in itself (its rank, the first node's address)
_RANK, _MAIN_IP = "@@RLFT_SLURM_RANK@@", "@@RLFT_SLURM_MAIN_IP@@"
_SHELL_VALUES = {_RANK: '"$SLURM_PROCID"', _MAIN_IP: '"$MAIN_IP"'}


@dataclass
class DryRun:
    text: str                   # what `--dry-run` prints (comment lines and the commands)
    script: Path | None = None  # the SLURM script written, with a `slurm:` section


def is_multi(cfg: RlftConfig) -> bool:
    """Several processes under a strategy: what `launch.needs_launch` decides in the command's own process."""
    hw = cfg.hw
    return (hw.num_processes > 1 or hw.num_machines > 1) and hw.distributed_strategy != "none"


def launch_env(cfg: RlftConfig) -> dict[str, str]:
    """The variables `launch.launch` sets for the processes it starts (it keeps an OMP_NUM_THREADS already set)."""
    env = {LAUNCHED_ENV: "1"}
    if cfg.hw.device == "cpu":
        env["OMP_NUM_THREADS"] = "1"
        if cfg.hw.distributed_strategy == "fsdp":
            env[CPU_FSDP_ENV] = "1"
    return env


def as_accelerate_launch(cmd: list[str]) -> list[str]:
    """`python -m accelerate.commands.launch ...` written as the `accelerate launch ...` a user types."""
    if len(cmd) > 2 and cmd[1:3] == ["-m", "accelerate.commands.launch"]:
        return ["accelerate", "launch", *cmd[3:]]
    return cmd


def _one_line(text: str) -> str:
    """`text` for a comment line (of the script or the printed plan): each control character written as Python
    writes it (`\\n`), so no value can end the line and have the rest run. Validation refuses them in the config's
    values; a folder found on disk (a bare --resume) may still hold one."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _quote(token: str) -> str:
    """shlex.quote, leaving the stand-ins as the shell variables they stand for."""
    parts = re.split(f"({'|'.join(map(re.escape, _SHELL_VALUES))})", token)
    return "".join(_SHELL_VALUES[p] if p in _SHELL_VALUES else shlex.quote(p) for p in parts if p) or "''"


def rlft_args(argv: list[str], hw: str) -> list[str]:
    """The command's arguments as the launched processes get them: no --dry-run, `--hw` resolved."""
    return replace_hw([a for a in argv if a != "--dry-run"], hw)


def machine_args(args: list[str], root: Path, rank: int | str | None) -> list[str]:
    """What `launch.relaunch` passes on (the run folder pinned, --overwrite done by it already), with this
    machine's hw.machine_rank when there are several."""
    keep = [a for a in args if a != "--overwrite" and not a.startswith(("train.output_dir=", "hw.machine_rank="))]
    return keep + ([f"hw.machine_rank={rank}"] if rank is not None else []) + [f"train.output_dir={root}"]


def machine_command(cfg: RlftConfig, args: list[str], root: Path, rank: int) -> str:
    """One machine's line: the launcher's variables, then its `accelerate launch` command."""
    mine = copy.deepcopy(cfg)
    mine.hw.machine_rank = rank
    cmd = accelerate_command(mine, machine_args(args, root, rank if cfg.hw.num_machines > 1 else None))
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch_env(cfg).items())
    return f"{env} {shlex.join(as_accelerate_launch(cmd))}"


def _describe(cfg: RlftConfig, hw: str) -> str:
    h = cfg.hw
    if not is_multi(cfg):
        return f"hw {hw} ({h.device}), 1 process"
    total = h.num_processes * h.num_machines
    where = ("1 machine" if h.num_machines == 1 else f"{h.num_machines} machines, {h.num_processes} each")
    return f"hw {hw} ({h.device}), {total} processes on {where} ({h.distributed_strategy})"


_SAMPLERS = {"hf": "transformers generate", "transformers": "transformers generate",
             "vllm": "a vLLM engine in the training process"}


def sampling_line(cfg: RlftConfig) -> str | None:
    """Who samples the run's completions, training and evaluation, or None for a stage that samples none."""
    from rlft.config.stages import get_spec

    if not get_spec(cfg.stage).samples:
        return None
    backend = cfg.sampling.backend
    rlft_side = f"{_SAMPLERS.get(backend, backend)} (sampling.backend {backend})"
    if cfg.stage == "grpo" and not cfg.env.name:  # single-turn GRPO trains on TRL's own samples
        gen = cfg.grpo.generation_backend
        return (f"# sampling: training by {_SAMPLERS.get(gen, gen)} inside TRL's trainer (grpo.generation_backend "
                f"{gen}); evaluations by {rlft_side}")
    return f"# sampling: training and evaluations by {rlft_side}"


def launch_lines(cfg: RlftConfig, hw: str, args: list[str], root: Path, named: bool) -> list[str]:
    """The printed plan: a header (and who samples), then the plain command (one process) or one launch line per
    machine."""
    folder = str(root) if named else f"{Path(default_output_dir(cfg.stage)).parent}/{cfg.stage}-<timestamp>, named " \
                                     "when it starts"
    lines = [f"# rlft train --dry-run: stage {cfg.stage}, {_describe(cfg, hw)}; run folder {_one_line(folder)}"]
    sampling = sampling_line(cfg)
    if sampling is not None:
        lines.append(sampling)
    if not is_multi(cfg):
        return lines + [shlex.join(["rlft", *args])]
    h = cfg.hw
    lines.append("# `rlft train` checks, creates and locks the run folder and writes its config.yaml, then starts "
                 "the line(s) below; run by hand, they skip that")
    if "--overwrite" in args:
        lines.append(_one_line(f"# --overwrite: `rlft train` moves the run in {root} to {root}.old before it starts "
                               "them"))
    if h.num_machines > 1:
        lines.append(_one_line(f"# each machine runs its own line (they differ only in its rank); machine 0 is "
                               f"reached at {h.main_process_ip or '<hw.main_process_ip>'}:{h.main_process_port}"))
        if not h.main_process_ip:
            lines.append("# warning: hw.main_process_ip is not set: every machine needs machine 0's address "
                         "(hw.main_process_ip=ADDRESS); the SLURM script passes its first node's")
    for rank in range(h.num_machines):
        lines.append(f"# machine {rank} of {h.num_machines}" + (" (rank 0 holds the run folder)" if rank == 0 else ""))
        lines.append(machine_command(cfg, args, root, rank))
    return lines


# --- SLURM -------------------------------------------------------------------------------------------------

def slurm_run_folder(cfg: RlftConfig, opts: RunOptions) -> Path:
    """The run folder the SLURM job trains in, checked before the script is written there: new, empty, or an rlft
    run folder (with --resume one that holds a run, without it one that holds only an earlier script). The job
    has no launcher of its own to check, create or replace it, so --overwrite is refused."""
    if opts.overwrite:
        raise RunError("--overwrite does not go with a `slurm:` dry run: the job has no launcher to move the old run "
                       "aside; move it yourself or set train.output_dir to a new folder")
    if cfg.train.output_dir is None:
        cfg.train.output_dir = str(find_run_to_resume(cfg, opts.argv) if opts.resume
                                   else default_output_dir(cfg.stage))
    root = Path(cfg.train.output_dir)
    check_writable(root)
    if root.exists() and not root.is_dir():
        raise RunError(f"run folder {root} is a file; set train.output_dir to a folder")
    names = set(os.listdir(root)) if root.is_dir() else set()
    if names and not is_run_folder(root):
        raise RunError(f"run folder {root} already exists, is not empty and is not an rlft run folder; set "
                       f"train.output_dir to a new or empty folder")
    holds_run = bool(names - {MARKER, SBATCH_NAME})
    if opts.resume and not holds_run:
        raise RunError(f"nothing to resume: run folder {root} holds no run yet (drop --resume to start one)")
    if not opts.resume and holds_run:
        raise RunError(f"run folder {root} already holds a run: pass --resume to continue it in the job, or set "
                       f"train.output_dir to a new folder")
    return root


def job_name(cfg: RlftConfig, root: Path) -> str:
    return cfg.slurm.job_name or re.sub(r"[\s\x00-\x1f\x7f-\x9f]+", "_", root.name) or f"rlft-{cfg.stage}"


def sbatch_script(cfg: RlftConfig, args: list[str], root: Path, cwd: Path) -> str:
    """The batch script: one task per node, each running the launch line with its node's rank (SLURM_PROCID) and
    the first node of the allocation as machine 0 (MAIN_IP), in the folder the command was given in."""
    s, h = cfg.slurm, cfg.hw
    gpus = s.gpus_per_node if s.gpus_per_node is not None else (h.num_processes if h.device == "cuda" else 0)
    path = root / SBATCH_NAME
    lines = ["#!/bin/bash",
             _one_line(f"# rlft: stage {cfg.stage}, run folder {root}; written by `rlft train --dry-run`, submit "
                       f"with: sbatch {shlex.quote(str(path))}"),
             _one_line(f"#SBATCH --job-name={job_name(cfg, root)}"),
             f"#SBATCH --nodes={s.nodes or h.num_machines}",
             "#SBATCH --ntasks-per-node=1"]
    lines += [f"#SBATCH --gpus-per-node={gpus}"] if gpus else []
    lines += [_one_line(f"#SBATCH --partition={s.partition}")] if s.partition else []
    lines.append(_one_line(f"#SBATCH --time={s.time.strip()}"))
    lines += [f"#SBATCH --cpus-per-task={s.cpus_per_task}"] if s.cpus_per_task else []
    lines += [line for line in s.extra if line.lstrip().startswith("#SBATCH")]
    lines += ["", "set -e", f"cd {shlex.quote(str(cwd))}"]
    lines += [line for line in s.extra if not line.lstrip().startswith("#SBATCH")]
    # each node runs `rlft train` itself, so every rlft check runs there: node 0 claims the run folder and writes
    # config.yaml, every node waits at most hw.rendezvous_timeout_s for the others and compares configs
    keep = [a for a in args if a != "--overwrite" and not a.startswith(("train.output_dir=", "hw.machine_rank=",
                                                                            "hw.main_process_ip="))]
    if is_multi(cfg) and cfg.hw.num_machines > 1:
        lines += ['MAIN_IP=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)', "export MAIN_IP"]
        keep += [f"hw.machine_rank={_RANK}", f"hw.main_process_ip={_MAIN_IP}"]
    inner = " ".join(map(_quote, ["rlft", *keep, f"train.output_dir={root}"]))
    lines.append(f"srun bash -c {shlex.quote(inner)}")  # every value inside quotes, line breaks included
    return "\n".join(lines) + "\n"


def write_script(root: Path, text: str) -> Path:
    """<run folder>/launch.sbatch; a new or empty folder is created and marked as the run's (rlft's folder rules)."""
    root.mkdir(parents=True, exist_ok=True)
    if read_marker(root) is None:
        mark(root, RUN_KIND)
    path = root / SBATCH_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


# --- the command ----------------------------------------------------------------------------------------------

def dry_run(cfg: RlftConfig, opts: RunOptions, hw: str, argv: list[str], cwd: Path | None = None) -> DryRun:
    """What `rlft train ARGV` (ARGV with --dry-run) would start, checked as `rlft train` checks the run folder
    before it starts anything. `hw`: the resolved profile (`auto` already picked)."""
    args = rlft_args(argv, hw)
    named = cfg.train.output_dir is not None
    if cfg.slurm is None:
        root = check_run_dir(cfg, opts).root  # names the folder (a bare --resume finds its run); creates nothing
        return DryRun("\n".join(launch_lines(cfg, hw, args, root, named or is_multi(cfg))) + "\n")
    root = slurm_run_folder(cfg, opts)
    cwd = Path(cwd or os.getcwd()).resolve()
    path = write_script(root, sbatch_script(cfg, args, root, cwd))
    lines = launch_lines(cfg, hw, args, root, True)
    nodes = cfg.hw.num_machines
    lines += [_one_line(f"# SLURM ({nodes} node{'s' if nodes != 1 else ''}, one task each running its node's "
                        f"line): the job script is {path}; submit it with:"),
              shlex.join(["sbatch", str(path)])]
    return DryRun("\n".join(lines) + "\n", path)
