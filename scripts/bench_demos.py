"""Do the demos' learning claims hold on any CPU kernel and seed? Runs each demo for several seeds under each
CPU capability torch offers on this machine (ATEN_CPU_CAPABILITY: the machine's own, avx2, avx512 where the CPU
has it, and `default`, the plain C++ path) and prints, per claimed number, mean (min-max) over every run beside
the threshold its test asserts and the worst run's margin to it.

A sampled tiny model turns last-bit differences between kernels into different tokens, so a claim measured on
one float path only is not a claim; seeds stand in for the machines not at hand.

    python scripts/bench_demos.py [--demos grpo,pipeline,...] [--seeds 1,2,3] [--kernels native,avx2,default]
                                  [--jobs 2] [--set DEMO:KEY=VALUE ...] [--json out.json] [--check]

--check exits 1 when any run misses a threshold (CI runs a subset this way). Each run is its own `rlft`
process in a fresh folder, with hw.cpu_threads=1 so that --jobs runs side by side without sharing cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "configs" / "examples"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fmean(values) -> float:
    values = list(values)
    return statistics.fmean(values) if values else float("nan")


def training_rows(run: Path) -> list[dict]:
    return [r for r in read_jsonl(run / "metrics.jsonl") if "eval_reward" not in r and "reward" in r]


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def reward_ends(run: Path, key: str = "reward") -> dict:
    """Mean of the first and last 10 training rows, and the held-out eval at start and end."""
    rows = [r for r in training_rows(run) if r.get(key) is not None]
    ev = summary(run).get("eval") or {}
    return {"first10": fmean(r[key] for r in rows[:10]), "last10": fmean(r[key] for r in rows[-10:]),
            "eval_start": (ev.get("start") or {}).get("reward_mean"),
            "eval_end": (ev.get("end") or {}).get("reward_mean")}


def episode_ends(run: Path) -> dict:
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "episode_return" in r]
    ev = summary(run)["eval"]
    return {"success_gain": fmean(r["success_rate"] for r in rows[-10:]) - fmean(r["success_rate"] for r in rows[:10]),
            "return_gain": fmean(r["episode_return"] for r in rows[-10:])
            - fmean(r["episode_return"] for r in rows[:10]),
            "eval_success_gain": ev["end"]["success_rate"] - ev["start"]["success_rate"]}


def pipeline_stages(cwd: Path, name: str) -> list[dict]:
    return json.loads((cwd / "runs" / name / "pipeline_summary.json").read_text())["stages"]


def pipeline_ends(cwd: Path) -> dict:
    stages = pipeline_stages(cwd, "pipeline_demo")
    ends = [s["eval_end"] for s in stages]
    return {**{f"{s['stage']}_end": s["eval_end"] for s in stages},
            "min_stage_step": min(b - a for a, b in zip(ends, ends[1:])),
            "stage_warnings": sum(len(s["warnings"]) for s in stages)}


def kl_run(cwd: Path, name: str, stage_dir: str) -> dict:
    run = cwd / "runs" / name / stage_dir
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "eval_reward" not in r and "kl_policy_ref" in r]
    kls, rewards = [r["kl_policy_ref"] for r in rows], [r["reward"] for r in rows]
    last = pipeline_stages(cwd, name)[-1]
    window = [fmean(kls[max(0, i - 2):i + 1]) for i in range(len(kls))]  # what the KL health rules read
    return {"kl_max": max(kls), "kl_max_window3": max(window), "kl_last20": fmean(kls[-20:]),
            "reward_gain": fmean(rewards[-10:]) - fmean(rewards[:10]),
            "eval_gain": last["eval_end"] - last["eval_start"]}


def preference(run: Path) -> dict:
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "rewards/accuracies" in r]
    return {"acc_last5": fmean(r["rewards/accuracies"] for r in rows[-5:])}


def pairwise(run: Path) -> dict:
    ev = summary(run)["eval"]
    return {"acc_start": ev["start"]["pairwise_accuracy"], "acc_end": ev["end"]["pairwise_accuracy"],
            "margin_end": ev["end"]["reward_margin"]}


def eval_gain(run: Path) -> dict:
    ev = summary(run)["eval"]
    return {"eval_start": ev["start"]["reward_mean"], "eval_end": ev["end"]["reward_mean"],
            "eval_gain": ev["end"]["reward_mean"] - ev["start"]["reward_mean"]}


@dataclass
class Demo:
    """One demo: the rlft arguments (run in a fresh folder; `{out}` is the run folder), how to read its numbers
    from that folder, and the thresholds its test asserts ((op, value) per number)."""

    args: list[str]
    read: Callable[[Path], dict]
    claims: dict[str, tuple[str, float]] = field(default_factory=dict)
    test: str = ""


def _train(stage: str, config: str, *extra: str) -> list[str]:
    return ["train", "--stage", stage, "--hw", "cpu", "-c", str(EXAMPLES / config), "train.output_dir={out}", *extra]


def _pipeline(config: str, *extra: str) -> list[str]:
    return ["pipeline", "run", str(EXAMPLES / config), *extra]


KL_GRPO = ["stages.grpo.grpo.kl_penalty_coef=0.05", "stages.grpo.grpo.adaptive_kl=true",
           "stages.grpo.train.learning_rate=5e-4", "stages.grpo.train.max_steps=150",
           "stages.grpo.grpo.temperature=0.8", "stages.grpo.train.lr_scheduler_type=constant",
           "stages.grpo.monitor.entropy_critical=0.05"]

DEMOS: dict[str, Demo] = {
    "grpo": Demo(_train("grpo", "grpo_demo.yaml"), lambda d: reward_ends(d / "run"),
                 {"first10": ("<", 0.1), "last10": (">", 0.8), "eval_end": (">", 0.9)},
                 "test_e2e_grpo.py::test_demo_learns"),
    "ppo": Demo(_train("ppo", "ppo_demo.yaml"), lambda d: {**reward_ends(d / "run"), **eval_gain(d / "run")},
                {"first10": ("<", 0.2), "last10": (">", 0.5), "eval_gain": (">", 0.45)},
                "test_e2e_ppo.py::test_demo_learns"),
    "async": Demo(_train("grpo", "grpo_demo.yaml", "grpo.async.max_steps_off_policy=2"),
                  lambda d: reward_ends(d / "run"),
                  {"first10": ("<", 0.1), "last10": (">", 0.55), "eval_end": (">", 0.9)},
                  "test_e2e_async.py::test_async_demo_learns_within_its_lag"),
    "streaming": Demo(_train("grpo", "grpo_demo.yaml", "grpo.stream_minibatch.num_minibatches=2"),
                      lambda d: reward_ends(d / "run"), {"first10": ("<", 0.1), "last10": (">", 0.55)},
                      "test_e2e_async.py::test_streaming_demo_learns"),
    "pipeline": Demo(_pipeline("pipeline_demo.yaml"), pipeline_ends,
                     {"grpo_end": (">=", 0.9), "min_stage_step": (">=", -0.02), "stage_warnings": ("<=", 0)},
                     "test_pipeline.py::test_pipeline_demo_runs"),
    "kl_ppo": Demo(_pipeline("pipeline_ppo_demo.yaml"), lambda d: kl_run(d, "pipeline_ppo_demo", "03-ppo"),
                   {"kl_max_window3": ("<", 0.3), "kl_max": ("<", 0.3), "kl_last20": ("<", 0.15),
                    "reward_gain": (">", 0.03), "eval_gain": (">", 0.03)},
                   "test_e2e_kl_control.py::test_ppo_demo_with_kl_on"),
    "kl_grpo": Demo(_pipeline("pipeline_demo.yaml", *KL_GRPO), lambda d: kl_run(d, "pipeline_demo", "03-grpo"),
                    {"kl_max_window3": ("<", 0.3), "kl_max": ("<", 0.45), "reward_gain": (">", 0.05),
                     "eval_gain": (">", 0.0)},
                    "test_e2e_kl_control.py::test_grpo_demo_with_kl_on"),
    "tool_ppo": Demo(_train("ppo", "tool_use_ppo.yaml"), lambda d: episode_ends(d / "run"),
                     {"success_gain": (">", 0.5), "return_gain": (">", 15), "eval_success_gain": (">", 0.5)},
                     "test_e2e_episodes.py::test_tool_use_ppo_learns"),
    "tool_grpo": Demo(_train("grpo", "tool_use_grpo.yaml"), lambda d: episode_ends(d / "run"),
                      {"success_gain": (">", 0.4), "return_gain": (">", 15), "eval_success_gain": (">", 0.5)},
                      "test_e2e_episodes.py::test_tool_use_grpo_learns"),
    "dpo": Demo(_train("dpo", "dpo_demo.yaml"), lambda d: preference(d / "run"), {"acc_last5": (">=", 0.9)},
                "test_e2e_preference.py::test_dpo_demo_learns"),
    "orpo": Demo(_train("orpo", "orpo_demo.yaml"), lambda d: preference(d / "run"), {"acc_last5": (">=", 0.8)},
                 "test_e2e_preference.py::test_orpo_demo_learns"),
    "rm": Demo(_train("rm", "rm_demo.yaml"), lambda d: pairwise(d / "run"),
               {"acc_end": (">=", 0.85), "margin_end": (">", 1.0)}, "test_e2e_rm.py::test_rm_demo_learns"),
    "rs_sft": Demo(_train("rs_sft", "rs_sft_demo.yaml"), lambda d: eval_gain(d / "run"),
                   {"eval_start": ("<", 0.1), "eval_gain": (">", 0.3)}, "test_e2e_rs_awr.py::test_rs_sft_demo_learns"),
    "awr": Demo(_train("awr", "awr_demo.yaml"), lambda d: eval_gain(d / "run"),
                {"eval_start": ("<", 0.1), "eval_gain": (">", 0.2)}, "test_e2e_rs_awr.py::test_awr_demo_learns"),
}

OPS = {"<": lambda a, b: a < b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}


def cpu_kernels() -> list[str]:
    """The capabilities this CPU can run: `native` (torch's own choice), avx2/avx512 where the CPU has them, and
    `default` (no vector kernels)."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    kernels = ["native"]
    if " avx2" in flags:
        kernels.append("avx2")
    if " avx512f" in flags and " avx512bw" in flags:
        kernels.append("avx512")
    return kernels + ["default"]


def native_env() -> dict:
    """This environment without a forced CPU kernel: the machine's own."""
    return {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}


def native_kernel() -> str:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=native_env())
    return out.stdout.strip().lower() or "unknown"


def run_one(name: str, demo: Demo, seed: int, kernel: str, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"rlft-bench-{name}-") as tmp:
        cwd = Path(tmp)
        args = [a.replace("{out}", str(cwd / "run")) for a in demo.args] + [f"train.seed={seed}", "hw.cpu_threads=1",
                                                                          *extra]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        env.pop("ATEN_CPU_CAPABILITY", None)
        if kernel != "native":
            env["ATEN_CPU_CAPABILITY"] = kernel
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "rlft.cli", *args], cwd=cwd, env=env, capture_output=True,
                              text=True)
        row = {"demo": name, "seed": seed, "kernel": kernel, "wall_s": round(time.perf_counter() - t0, 1),
               "rc": proc.returncode}
        if proc.returncode != 0:
            row["error"] = proc.stderr[-1500:]
            return row
        try:
            row["numbers"] = demo.read(cwd)
        except (OSError, KeyError, ValueError, IndexError) as exc:  # a run that wrote less than its test reads
            row["error"] = f"could not read its numbers: {exc!r}"
        return row


def misses(demo: Demo, row: dict) -> list[str]:
    if "numbers" not in row:
        return ["run failed"]
    out = []
    for key, (op, bound) in demo.claims.items():
        value = row["numbers"].get(key)
        if value is None or not OPS[op](value, bound):
            out.append(f"{key}={value} (needs {op} {bound})")
    return out


def table(rows: list[dict]) -> list[str]:
    lines = ["| demo | number | mean (min-max) | runs | threshold | worst margin |", "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["demo"] for r in rows):
        demo, done = DEMOS[name], [r for r in rows if r["demo"] == name and "numbers" in r]
        keys = list(dict.fromkeys(k for r in done for k in r["numbers"]))
        for key in keys:
            values = [r["numbers"][key] for r in done if r["numbers"].get(key) is not None]
            if not values:
                continue
            op, bound = demo.claims.get(key, ("", None))
            worst = (max(values) if op in ("<", "<=") else min(values)) if bound is not None else None
            margin = "" if worst is None else f"{abs(worst - bound):.3f}" + ("" if OPS[op](worst, bound) else " MISS")
            lines.append(f"| {name} | {key} | {fmean(values):.3f} ({min(values):.3f}-{max(values):.3f}) | "
                         f"{len(values)} | {op + ' ' + str(bound) if bound is not None else ''} | {margin} |")
        failed = [r for r in rows if r["demo"] == name and "numbers" not in r]
        if failed:
            lines.append(f"| {name} | failed runs | {len(failed)} | | | |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demos", default=",".join(DEMOS), help=f"comma-separated, of: {', '.join(DEMOS)}")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--kernels", default=None, help="comma-separated, default: every one this CPU runs")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    parser.add_argument("--set", action="append", default=[], metavar="DEMO:KEY=VALUE",
                        help="an override for one demo's runs (DEMO:KEY=VALUE) or for all (KEY=VALUE)")
    parser.add_argument("--json", type=Path, help="write every run's numbers here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a run misses its test's threshold")
    opts = parser.parse_args()
    names = [n for n in opts.demos.split(",") if n]
    unknown = [n for n in names if n not in DEMOS]
    if unknown:
        parser.error(f"unknown demo(s) {unknown}; known: {', '.join(DEMOS)}")
    kernels = opts.kernels.split(",") if opts.kernels else cpu_kernels()
    seeds = [int(s) for s in opts.seeds.split(",")]
    native = native_kernel()
    kernels = [k for k in kernels if not (k != "native" and k == native)]  # native already runs it

    def extra_for(name: str) -> list[str]:
        return [s.split(":", 1)[1] if ":" in s.split("=", 1)[0] else s for s in opts.set
                if ":" not in s.split("=", 1)[0] or s.split(":", 1)[0] == name]

    # the tiny model is built once, on this machine's own kernels, before any run under a forced one: torch's
    # float normal_ differs in the last bit between kernels, so the first run's kernel would otherwise pick the
    # weights every later run and test reads from the cache
    build = "from rlft.tiny import ensure_tiny_model; ensure_tiny_model()"
    subprocess.run([sys.executable, "-c", build], check=True, cwd=ROOT, env=native_env())
    jobs = [(n, s, k) for n in names for k in kernels for s in seeds]
    print(f"# {len(jobs)} runs: demos {names}, seeds {seeds}, kernels {kernels} (native = {native}), "
          f"{opts.jobs} at a time", flush=True)
    rows = []
    with ThreadPoolExecutor(max_workers=opts.jobs) as pool:
        for row in pool.map(lambda job: run_one(job[0], DEMOS[job[0]], job[1], job[2], extra_for(job[0])), jobs):
            bad = misses(DEMOS[row["demo"]], row)
            numbers = ", ".join(f"{k} {v:.3f}" for k, v in (row.get("numbers") or {}).items() if v is not None)
            print(f"{row['demo']:10s} seed {row['seed']} {row['kernel']:8s} {row['wall_s']:6.1f}s  {numbers}"
                  + (f"  MISSES: {'; '.join(bad)}" if bad else ""), flush=True)
            if "error" in row:
                print(row["error"], flush=True)
            rows.append(row)
    print()
    print("\n".join(table(rows)))
    if opts.json:
        opts.json.write_text(json.dumps({"native": native, "rows": rows}, indent=1))
    failed = [r for r in rows if misses(DEMOS[r["demo"]], r)]
    if opts.check and failed:
        print(f"{len(failed)} of {len(rows)} runs missed a threshold", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
