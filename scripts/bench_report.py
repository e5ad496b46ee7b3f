"""Benchmark `rlft report` on a synthetic long run: by default 2,000 steps, 50,000 completions (200
characters each, 3 reward functions, 100 prompts), GRPO-like metrics, health events and reward logs.
Goal: the report builds in under 10 s and index.html stays under 20 MB.

    python scripts/bench_report.py [--steps 2000] [--completions 50000] [--chars 200] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORDS = ("the answer is letter repeat z many times because step reward format json number think so "
         "therefore final result check again value").split()
REWARDS = ("format", "correctness", "length_penalty")


def make_run(root: Path, steps: int, completions: int, chars: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    root.mkdir(parents=True)
    per_step = max(1, completions // steps)
    n_prompts = 100
    with open(root / "metrics.jsonl", "w") as m, open(root / "completions.jsonl", "w") as c, \
            open(root / "reward_logs.jsonl", "w") as logs:
        written = 0
        for s in range(1, steps + 1):
            progress = s / steps
            row = {"step": s, "time": 1.7e9 + 3 * s, "loss": rng.gauss(0, 0.05), "grad_norm": abs(rng.gauss(1, 0.3)),
                   "learning_rate": 1e-6, "num_tokens": 400.0 * s, "completion_length": 40 + rng.random() * 10,
                   "reward": progress * 0.8 + rng.random() * 0.1, "reward_std": 0.3 - 0.2 * progress,
                   "frac_constant_groups": rng.random() * 0.2, "frac_unscored": 0.0, "kl_coef": 0.05,
                   "kl_policy_ref": 0.01 * progress, "kl_sample_train_v1": 1e-4 * rng.random(),
                   "kl_sample_train_v2": 1e-4 * rng.random(), "entropy": 2.5 - progress, "step_time": 3.0,
                   "epoch": s / 100, "reward_version": 1 if s < steps // 2 else 2}
            for name in REWARDS:
                row[f"rewards/{name}/mean"] = rng.random()
                row[f"rewards/{name}/std"] = rng.random() * 0.2
                row[f"rewards/{name}/errors"] = float(rng.random() < 0.01)
            for k in ("min_length", "max_length", "clipped_ratio", "mean_terminated_length"):
                row[f"completions/{k}"] = rng.random() * 50
            for k in ("low_mean", "high_mean", "region_mean"):
                row[f"clip_ratio/{k}"] = rng.random() * 0.01
            m.write(json.dumps(row) + "\n")
            n = per_step if s < steps else completions - written
            for i in range(n):
                pid = rng.randrange(n_prompts)
                scores = {name: round(rng.random(), 6) for name in REWARDS}
                text = " ".join(rng.choice(WORDS) for _ in range(chars // 5))[:chars]
                c.write(json.dumps({"step": s, "prompt_id": pid, "prompt": f"Prompt number {pid}: repeat the letter z",
                                    "completion": text, "rewards": scores, "total": round(sum(scores.values()), 6),
                                    "advantage": round(rng.gauss(0, 1), 6), "reward_version": row["reward_version"]})
                        + "\n")
                written += 1
            for name in REWARDS:
                logs.write(json.dumps({"step": s, "reward": name, "calls": 1, "ms": rng.random() * 20,
                                       "errors": int(row[f"rewards/{name}/errors"]),
                                       "output": f"{name}: scored {per_step} "
                                                 "completions" if s % 10 == 0 else ""}) + "\n")
    with open(root / "health.jsonl", "w") as h:
        for s in range(50, steps, 97):
            h.write(json.dumps({"step": s, "rule": "grad_norm_high", "level": "warning", "metric": "grad_norm",
                                "value": 6.0, "threshold": 5.0, "action": "warn",
                                "message": "gradient norm high"}) + "\n")
    (root / "summary.json").write_text(json.dumps({"stage": "grpo", "status": "finished", "steps": steps}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--completions", type=int, default=50000)
    ap.add_argument("--chars", type=int, default=200, help="characters per completion")
    ap.add_argument("--keep", type=Path, help="build the run and the report here and keep them")
    ap.add_argument("--max-seconds", type=float, default=10.0)
    ap.add_argument("--max-mb", type=float, default=20.0)
    args = ap.parse_args()
    from rlft.monitor.report import build_report

    base = args.keep or Path(tempfile.mkdtemp(prefix="rlft-bench-report-"))
    run = base / "run"
    if run.exists():
        shutil.rmtree(run)
    t0 = time.perf_counter()
    make_run(run, args.steps, args.completions, args.chars)
    made = time.perf_counter() - t0
    c0, w0 = time.process_time(), time.perf_counter()
    res = build_report([run])
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    mb = res.bytes / 1e6
    print(f"synthetic run: {args.steps} steps, {res.completions} completions of {args.chars} chars "
          f"({(run / 'completions.jsonl').stat().st_size / 1e6:.1f} MB jsonl), made in {made:.1f} s")
    print(f"report: {res.graphs} graphs, index.html {mb:.2f} MB, built in {wall:.2f} s wall / {cpu:.2f} s CPU"
          f"{'; ' + res.note if res.note else ''}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.1f} on {os.cpu_count()} cores (wall time exceeds CPU time when others share them)")
    ok = wall < args.max_seconds and mb < args.max_mb
    print(f"{'PASS' if ok else 'FAIL'}: goal < {args.max_seconds:g} s and < {args.max_mb:g} MB")
    if not args.keep:
        shutil.rmtree(base)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
