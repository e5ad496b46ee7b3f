"""Training steps per second of GRPO synchronous vs async (`grpo.async.max_steps_off_policy`) vs streaming
(`grpo.stream_minibatch.num_minibatches`) on the built-in tiny model, through the CLI.

Each mode is one `rlft train` run of the GRPO demo (same seed, data and settings); steps/s is taken from
the `time` column of metrics.jsonl between the first and the last step, so start-up and the start/end
evaluations are left out. Also printed: the mean sampling time, learner time and overlap fraction the
async modes log. Pass extra `key=value` overrides after `--` (e.g. `-- grpo.max_tokens=64`).

    python scripts/bench_grpo_modes.py [--steps 40] [--lag 2] [--minibatches 2] [--config FILE] [-- key=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "rlft" / "configs" / "examples" / "grpo_demo.yaml"


def run(mode: str, extra: list[str], steps: int, folder: Path, config: Path = DEMO) -> dict:
    out = folder / mode.split()[0]
    cmd = [sys.executable, "-m", "rlft.cli", "train", "--stage", "grpo", "--hw", "cpu", "-c", str(config),
           f"train.output_dir={out}", f"train.max_steps={steps}", f"train.save_steps={steps}", "data.eval_prompts=0",
           *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{mode}: exit {res.returncode}\n{res.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    span = rows[-1]["time"] - rows[0]["time"]
    mean = lambda key: statistics.fmean(r[key] for r in rows if r.get(key) is not None) \
        if any(r.get(key) is not None for r in rows) else None  # noqa: E731
    return {"steps_per_s": (len(rows) - 1) / span, "reward_last10": statistics.fmean(r["reward"] for r in rows[-10:]),
            "generation_s": mean("time/generation_s"), "training_s": mean("time/training_s"),
            "overlap": mean("async/overlap_frac"), "staleness": mean("async/staleness_mean")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--lag", type=int, default=2, help="max_steps_off_policy of the async mode")
    p.add_argument("--minibatches", type=int, default=2, help="num_minibatches of the streaming mode")
    p.add_argument("--config", type=Path, default=DEMO,
                   help="GRPO config (e.g. rlft/configs/examples/tool_use_grpo.yaml: episodes, no streaming)")
    p.add_argument("extra", nargs="*", help="overrides for every mode, after --")
    a = p.parse_args()
    modes = {
        "sync": [],
        f"async (max_steps_off_policy {a.lag})": [f"grpo.async.max_steps_off_policy={a.lag}"],
        f"streaming (num_minibatches {a.minibatches})": [f"grpo.stream_minibatch.num_minibatches={a.minibatches}"],
    }
    import yaml

    if (yaml.safe_load(a.config.read_text()).get("env") or {}).get("name"):  # streaming: single-turn only
        modes.popitem()
    with tempfile.TemporaryDirectory() as tmp:
        results = {m: run(m, [*a.extra, *o], a.steps, Path(tmp), a.config) for m, o in modes.items()}
    base = results["sync"]["steps_per_s"]
    print(f"{'mode':34} {'steps/s':>8} {'vs sync':>8} {'sample s':>9} {'learn s':>8} {'overlap':>8} "
          f"{'stale':>6} {'reward':>7}")
    fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
    for m, r in results.items():
        print(f"{m:34} {r['steps_per_s']:8.2f} {r['steps_per_s'] / base:8.2f} {fmt(r['generation_s'], '9.3f')} "
              f"{fmt(r['training_s'], '8.3f')} {fmt(r['overlap'], '8.2f')} {fmt(r['staleness'], '6.2f')} "
              f"{r['reward_last10']:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
