"""`rlft plan` against the measured peak RSS of the same config, per case, on CPU.

Per case: the planned peak (`rlft plan --json`: from the data, and the worst case at the config's limits)
and the peak resident memory of a short `rlft train` run (its own process, read with os.wait4).

Two kinds of case:
- `grpo`, `dpo`, `ppo` (model --model, --steps steps): set up so that the real shapes reach the config's
  limits, where the data basis and the limits agree: prompts are cut to exactly the prompt budget (the
  budget is below the demo prompts' length, and data.too_long truncates), DPO pairs to dpo.max_length;
- `grpo-demo` (the GRPO demo, 10 steps), `grpo-smollm2` (the GRPO demo on SmolLM2-135M-Instruct, 2 steps,
  grpo.max_tokens=32), `dpo-smollm2` (the DPO demo on SmolLM2, 2 steps): the configs' ordinary settings,
  whose sequences stay well below their limits, so only the data basis can be close. SmolLM2 is the folder
  tests/test_realmodel.py converts into $RLFT_CACHE/realmodel (default .cache/rlft); without it those
  cases are skipped.

Each case is planned after its run, so that the tokenizer the run used (rlft's tiny model is built by its
first run) counts the data's tokens.

    python scripts/bench_plan.py [--model tiny|PATH] [--stages grpo,dpo,ppo|all|CASE,...] [--steps 2]
                                 [--set KEY=VALUE ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SMOLLM2 = Path(os.environ.get("RLFT_CACHE", ROOT / ".cache" / "rlft")) / "realmodel" / "smollm2-135m-instruct"
# the configs' ordinary settings: (stage, arguments, model, steps)
ORDINARY = {
    "grpo-demo": ("grpo", ["-c", "configs/examples/grpo_demo.yaml"], "tiny", 10),
    "grpo-smollm2": ("grpo", ["-c", "configs/examples/grpo_demo.yaml", "grpo.max_tokens=32"], str(SMOLLM2), 2),
    "dpo-smollm2": ("dpo", ["-c", "configs/examples/dpo_demo.yaml"], str(SMOLLM2), 2),
}
FORCED = ("grpo", "dpo", "ppo")

# Prompt tokens: below every demo prompt's length under the model's chat template (tiny: 23-26 tokens, pairs
# 25-29; SmolLM2-135M-Instruct: 36 and 39-41, of which its system message takes 30), so that every prompt
# (every DPO pair) is cut to exactly this many
PROMPT_TOKENS = {"tiny": 16}
DEFAULT_PROMPT_TOKENS = 32


def stage_args(stage: str, steps: int, prompt: int) -> list[str]:
    """--stage, the demo config and the overrides that make the run's shapes the planned ones."""
    if stage == "grpo":  # 2 prompts x 8 completions of 16 tokens, one micro-batch of 16
        return ["--stage", "grpo", "-c", "configs/examples/grpo_demo.yaml", f"train.max_steps={steps}",
                f"train.max_seq_length={prompt + 16}", "data.eval_prompts=0", "train.save_steps=100000"]
    if stage == "dpo":  # 8 pairs = 16 rows, each cut to the prompt length
        return ["--stage", "dpo", "-c", "configs/examples/dpo_demo.yaml", f"train.max_steps={steps}",
                f"dpo.max_length={prompt}", f"dpo.max_prompt_length={prompt - 4}", "train.save_steps=100000"]
    if stage == "ppo":  # 16 episodes of 8 tokens per update, minibatches of 8
        return ["--stage", "ppo", "-c", "configs/examples/ppo_demo.yaml", f"ppo.num_episodes={16 * steps}",
                f"train.max_seq_length={prompt + 8}", "data.eval_prompts=0", "ppo.eval_interval=100000",
                "ppo.save_interval=100000", "ppo.log_interval=16"]
    raise SystemExit(f"unknown case {stage}: {', '.join([*FORCED, *ORDINARY])} or all")


def case_args(case: str, model: str, steps: int, prompt: int) -> tuple[list[str], str]:
    """(the run's arguments, its model) of a case: a forced one on `model`, or an ordinary one on its own."""
    if case in ORDINARY:
        stage, args, own, own_steps = ORDINARY[case]
        return ["--stage", stage, *args, f"train.max_steps={own_steps}", f"model.name_or_path={own}"], own
    return stage_args(case, steps, prompt) + [f"model.name_or_path={model}"], model


def rlft(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlft.cli", *args]


def planned(args: list[str]) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(rlft("plan", "--hw", "cpu", *args, "--json"), cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"rlft plan failed: {proc.stderr[-2000:]}")
    return {**json.loads(proc.stdout), "seconds": time.perf_counter() - t0}


def measured(args: list[str], out: Path) -> tuple[float, float]:
    """(peak RSS in GiB, wall seconds) of `rlft train` in its own process."""
    log = out.with_suffix(".log")
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(rlft("train", "--hw", "cpu", *args, f"train.output_dir={out}"), cwd=ROOT,
                                stdout=fh, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, whatever else ran before
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"rlft train failed ({proc.returncode}): {log.read_text()[-2000:]}")
    return usage.ru_maxrss * 1024 / 2 ** 30, time.perf_counter() - t0  # ru_maxrss is in KiB on Linux


def row(case: str, model: str, plan: dict, rss: float, wall: float) -> dict:
    top = sorted(((k, v) for k, v in plan["terms"].items()), key=lambda kv: -kv[1])[:3]
    worst = plan["worst_case"]["peak_gb"]
    data = plan.get("data") or {}
    return {"stage": case, "model": Path(model).name, "basis": plan["basis"],
            "counted_with": data.get("counted_with"), "tokens": plan["tokens"], "planned_gb": plan["peak_gb"],
            "limits_gb": worst, "rss_gb": round(rss, 4), "ratio": round(plan["peak_gb"] / rss, 3),
            "limits_ratio": round(worst / rss, 3), "peak_phase": plan["peak_phase"], "top_terms": dict(top),
            "plan_s": round(plan["seconds"], 2), "train_s": round(wall, 1)}


def table(rows: list[dict]) -> str:
    out = [f"{'case':<13} {'model':<24} {'basis':<6} {'planned GiB':>11} {'at limits':>9} {'peak RSS GiB':>12} "
           f"{'plan/RSS':>8} {'limits/RSS':>10}  largest terms (GiB)"]
    for r in rows:
        top = ", ".join(f"{k} {v:.3f}" for k, v in r["top_terms"].items())
        out.append(f"{r['stage']:<13} {r['model'][:24]:<24} {r['basis']:<6} {r['planned_gb']:>11.3f} "
                   f"{r['limits_gb']:>9.3f} {r['rss_gb']:>12.3f} {r['ratio']:>8.2f} {r['limits_ratio']:>10.2f}  {top}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="model.name_or_path of grpo, dpo, ppo: tiny or a local folder")
    ap.add_argument("--stages", default="grpo,dpo,ppo", help=f"cases: {', '.join([*FORCED, *ORDINARY])}, or all")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=None,
                    help=f"prompt length (default: {PROMPT_TOKENS['tiny']} for tiny, else {DEFAULT_PROMPT_TOKENS})")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every run")
    ap.add_argument("--json", action="store_true", help="one JSON object per stage instead of the table")
    opts = ap.parse_args()
    model = opts.model if opts.model == "tiny" else str(Path(opts.model).resolve())
    cases = [*FORCED, *ORDINARY] if opts.stages == "all" else opts.stages.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            prompt = opts.prompt_tokens or PROMPT_TOKENS.get(opts.model, DEFAULT_PROMPT_TOKENS)
            args, case_model = case_args(case, model, opts.steps, prompt)
            if case in ORDINARY and case_model != "tiny" and not (Path(case_model) / "config.json").is_file():
                print(f"skipped {case}: no converted model at {case_model} (tests/test_realmodel.py with "
                      f"RLFT_REALMODEL=1 converts it there)", file=sys.stderr)
                continue
            args += opts.set
            rss, wall = measured(args, Path(tmp) / case)
            rows.append(row(case, case_model, planned(args), rss, wall))
            if opts.json:
                print(json.dumps(rows[-1]), flush=True)
    if not opts.json:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
