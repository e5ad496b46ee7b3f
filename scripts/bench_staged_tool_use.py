"""The tool agent, staged: ORPO -> RS-SFT -> PPO (configs/examples/pipeline_tool_use_demo.yaml) against PPO alone
(configs/examples/tool_use_ppo.yaml), both on the built-in tiny model and the `toolsim` tiny variant, with the same
number of PPO updates, over several seeds (train.seed). Prints, per seed and arm, the PPO run's final eval
(summary.json eval.end: success rate and mean episode return), the last training updates' success rate and
mean return (mean over the last 5 rows of metrics.jsonl), and the first update whose batch success rate reached
0.9; then the means per arm.

    python scripts/bench_staged_tool_use.py [--seeds 0 1 2] [--updates 40] [--json out.json]
    python scripts/bench_staged_tool_use.py --write-data   # (re)write the demo's data files, deterministically

A benchmark, not a test: each run is a subprocess of the `rlft` CLI, one at a time.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "rlft" / "configs" / "examples"
PIPELINE = EXAMPLES / "pipeline_tool_use_demo.yaml"
PPO_ALONE = EXAMPLES / "tool_use_ppo.yaml"
PREFS = EXAMPLES / "data" / "tool_use_demo_prefs.jsonl"
PROMPTS = EXAMPLES / "data" / "tool_use_demo_prompts.jsonl"
BATCH = 16       # ppo.batch_size of both arms: episodes per update
LAST = 5         # metrics rows averaged for "last"
TARGET = 0.9     # success rate that counts as reached

# The PPO example's task: toolsim tiny variant, one call per task ("Call f."), 32 tasks. The rejected answers of the
# preference pairs cover every way to miss the first turn: another known tool, the forbidden tool, a non-call.
STEPS, NUM_TASKS = 1, 32
REJECTED = ["l", "c", "w", "x", "F", "1", "ok", "?"]


def write_data() -> None:
    sys.path.insert(0, str(ROOT))
    from rlft.envs.toolsim import ToolSim

    env = ToolSim(variant="tiny", steps=STEPS)
    prefs, prompts = [], []
    for task_id in range(NUM_TASKS):
        opening = env.reset({"task_id": task_id}, task_id)
        assert len(opening) == 1 and opening[0]["role"] == "user", opening
        prompt = opening[0]["content"]  # a plain-text user turn: chat_template auto renders it as the env's messages
        row = {"prompt": prompt, "task_id": task_id, "env_seed": task_id}
        prompts.append(row)
        prefs.append({**row, "chosen": env.plan[0][0], "rejected": REJECTED[task_id % len(REJECTED)]})
    for path, rows in ((PREFS, prefs), (PROMPTS, prompts)):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {len(rows)} rows to {path.relative_to(ROOT)}")


def rlft(*args: str, log: Path, cwd: Path = ROOT) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.time()
    with open(log, "w") as out:
        rc = subprocess.run([sys.executable, "-m", "rlft.cli", *args], cwd=cwd, env=env, stdout=out,
                            stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"rlft {' '.join(args)} failed (exit {rc}); see {log}:\n" + log.read_text()[-3000:])
    return time.time() - t0


def ppo_result(run: Path, wall: float) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "success_rate" in r and "episode_return" in r]
    first = next((r["step"] for r in rows if r["success_rate"] >= TARGET), None)
    end, start = summary["eval"]["end"], summary["eval"]["start"]
    return {"updates": len(rows), "eval_start_success": start.get("success_rate"),
            "eval_start_return": start.get("reward_mean"),
            "eval_end_success": end.get("success_rate"), "eval_end_return": end.get("reward_mean"),
            "last_success": statistics.fmean(r["success_rate"] for r in rows[-LAST:]),
            "last_return": statistics.fmean(r["episode_return"] for r in rows[-LAST:]),
            "first_update_at_target": first, "wall_s": round(wall, 1)}


def run_seed(seed: int, updates: int, out: Path) -> dict:
    episodes = f"{updates * BATCH}"
    res = {}
    staged = out / f"staged-{seed}"  # the pipeline's runs go to <cwd>/runs/<name>/
    staged.mkdir(parents=True, exist_ok=True)
    wall = rlft("pipeline", "run", str(PIPELINE), f"train.seed={seed}", f"stages.ppo.ppo.num_episodes={episodes}",
                log=out / f"staged-{seed}.log", cwd=staged)
    summary = json.loads(next(staged.glob("runs/*/pipeline_summary.json")).read_text())
    res["staged"] = ppo_result(staged / summary["stages"][-1]["dir"], wall)
    res["staged"]["earlier"] = [{"stage": s["stage"], "eval_start": s["eval_start"], "eval_end": s["eval_end"],
                                 "wall_s": s.get("wall_s")} for s in summary["stages"][:-1]]
    alone = out / f"ppo-{seed}"
    wall = rlft("train", "--stage", "ppo", "--hw", "cpu", "-c", str(PPO_ALONE), f"train.output_dir={alone}",
                f"train.seed={seed}", f"ppo.num_episodes={episodes}", f"ppo.batch_size={BATCH}",
                f"ppo.mini_batch_size={BATCH // 2}", f"ppo.log_interval={BATCH}", "ppo.temperature=1.0",
                log=out / f"ppo-{seed}.log")
    res["ppo_alone"] = ppo_result(alone, wall)
    return res


def fmt(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def table(results: dict[int, dict], updates: int) -> str:
    head = (f"PPO updates per arm: {updates} ({updates * BATCH} episodes); "
            "eval = the PPO run's summary.json eval on 16 tasks; "
            f"last = mean of the last {LAST} updates; reach = first update with batch success >= {TARGET}\n")
    lines = ["| seed | arm | eval success start -> end | eval return start -> end | last success | last return "
             "| reach 0.9 | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for arm in ("staged", "ppo_alone"):
        for seed, res in results.items():
            r = res[arm]
            lines.append(f"| {seed} | {arm} | {fmt(r['eval_start_success'])} -> {fmt(r['eval_end_success'])} | "
                         f"{fmt(r['eval_start_return'], '.1f')} -> {fmt(r['eval_end_return'], '.1f')} | "
                         f"{fmt(r['last_success'])} | {fmt(r['last_return'], '.1f')} | "
                         f"{r['first_update_at_target'] if r['first_update_at_target'] is not None else 'never'} | "
                         f"{r['wall_s']:.0f} |")
        rs = [res[arm] for res in results.values()]
        reached = [r["first_update_at_target"] for r in rs if r["first_update_at_target"] is not None]

        def mean(key):
            vals = [r[key] for r in rs if r[key] is not None]
            return statistics.fmean(vals) if vals else None
        lines.append(f"| mean | {arm} | {fmt(mean('eval_start_success'))} -> {fmt(mean('eval_end_success'))} | "
                     f"{fmt(mean('eval_start_return'), '.1f')} -> {fmt(mean('eval_end_return'), '.1f')} | "
                     f"{fmt(mean('last_success'))} | {fmt(mean('last_return'), '.1f')} | "
                     f"{fmt(statistics.fmean(reached), '.1f') if reached else 'never'}"
                     f"{f' ({len(reached)}/{len(rs)} reached)' if len(reached) < len(rs) else ''} | "
                     f"{fmt(mean('wall_s'), '.0f')} |")
    earlier = [f"seed {seed}: " + ", ".join(f"{e['stage']} {fmt(e['eval_start'], '.1f')} -> {fmt(e['eval_end'], '.1f')}"
                                             for e in res["staged"]["earlier"]) for seed, res in results.items()]
    return (head + "\n".join(lines) + "\nearlier stages (eval: mean first-action return, start -> end):\n"
            + "\n".join(earlier))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--updates", type=int, default=40, help="PPO updates in both arms (16 episodes each)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--out", help="run folders go here (default: a temporary folder, removed)")
    p.add_argument("--write-data", action="store_true", help="write the demo's data files and exit")
    a = p.parse_args()
    if a.write_data:
        write_data()
        return 0
    tmp = None if a.out else tempfile.TemporaryDirectory(prefix="bench-staged-")
    out = Path(a.out or tmp.name)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for seed in a.seeds:
        results[seed] = run_seed(seed, a.updates, out)
        print(f"seed {seed}: staged {results[seed]['staged']['eval_end_success']}, "
              f"ppo alone {results[seed]['ppo_alone']['eval_end_success']}", file=sys.stderr, flush=True)
    print(table(results, a.updates))
    if a.json:
        Path(a.json).write_text(json.dumps({"updates": a.updates, "seeds": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
