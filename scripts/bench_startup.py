"""Start-up of the config commands against the bare import of what they cannot do without (issue 33).

Each command runs as a fresh process, in turn with the yardstick `python -c "import typer, omegaconf, yaml,
rich"` (A B A B ...), so a machine whose speed drifts moves both; the ratio is taken pair by pair and the
median of the ratios printed, with the medians of each side's CPU seconds (user + system, the child's own
accounting) and wall seconds. The target: every ratio at most 1.2.

    python scripts/bench_startup.py                 # the default commands, 15 pairs each
    python scripts/bench_startup.py -n 30 -- validate-config --stage grpo --hw a100

Bytecode is written first (one warm-up run each, PYTHONDONTWRITEBYTECODE unset), so the figures are those of
an installed package. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
YARDSTICK = ["-c", "import typer, omegaconf, yaml, rich"]
COMMANDS = (
    ["validate-config", "--stage", "grpo", "--hw", "cpu"],
    ["validate-config", "--stage", "grpo", "--hw", "a100"],
    ["show-config", "--stage", "grpo", "--hw", "cpu"],
    ["show-config", "--explain"],
    ["plan", "--stage", "grpo", "--hw", "cpu"],
    ["keys", "grpo.kl"],
    ["list"],
    ["--help"],
)


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def bench(args: list[str], n: int, env: dict) -> dict:
    script = Path(sys.executable).with_name("rlft")  # the console script, as users start it
    rlft = [str(script), *args] if script.exists() else [sys.executable, "-m", "rlft.cli", *args]
    base = [sys.executable, *YARDSTICK]
    timed(rlft, env), timed(base, env)  # warm-up: bytecode written, files in the page cache
    a, b = [], []
    for _ in range(n):
        a.append(timed(rlft, env))
        b.append(timed(base, env))
    med = statistics.median
    return {"cpu": med(x[0] for x in a), "base_cpu": med(x[0] for x in b),
            "ratio_cpu": med(x[0] / y[0] for x, y in zip(a, b)),
            "wall": med(x[1] for x in a), "ratio_wall": med(x[1] / y[1] for x, y in zip(a, b))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=15, help="pairs of runs per command")
    parser.add_argument("command", nargs="*", help="one rlft command (after --); default: the config commands")
    opts = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    commands = [opts.command] if opts.command else COMMANDS
    print(f"{'command':<48}{'cpu s':>8}{'base':>8}{'ratio':>8}{'wall s':>8}{'ratio':>8}   (medians, {opts.n} pairs)")
    for args in commands:
        r = bench(list(args), opts.n, env)
        print(f"{'rlft ' + ' '.join(args):<48}{r['cpu']:>8.3f}{r['base_cpu']:>8.3f}{r['ratio_cpu']:>8.2f}"
              f"{r['wall']:>8.3f}{r['ratio_wall']:>8.2f}")


if __name__ == "__main__":
    main()
