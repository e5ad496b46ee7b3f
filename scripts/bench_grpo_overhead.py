"""Overhead of rlft's GRPO hooks over stock TRL GRPOTrainer, on the same model, data and settings.

Runs short trainings of plain `trl.GRPOTrainer` and rlft's `RlftGRPOTrainer` alternately, each in its own
process (so each peak RSS is its own), and prints the median step time and the peak resident memory of
each and their ratios, for two comparisons:
  1. rlft `group_mean`, no KL            vs TRL (beta = 0)
  2. rlft `kl_penalty_mode: advantage`   vs TRL with beta > 0 (k3 KL in the loss)

Both trainers get the same TrainingArguments (rlft's mapping of the config): the ratios measure rlft's
hooks, not profile choices such as activation checkpointing (TRL's own default is on, rlft's cpu profile
turns it off, which alone costs ~0.4 GB on SmolLM2-135M; pass train.gradient_checkpointing=true to match).

    python scripts/bench_grpo_overhead.py [--rounds 3] [--steps 12] [--model PATH] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DEMO = os.path.join(ROOT, "configs", "examples", "grpo_demo.yaml")


class StepTimer:
    def __init__(self):
        from transformers import TrainerCallback

        timer = self

        class _CB(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                timer.t0 = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                timer.times.append(time.perf_counter() - timer.t0)

        self.times: list[float] = []
        self.callback = _CB()


def build(kind: str, overrides: list[str], out: str, timer: StepTimer):
    from trl import GRPOTrainer

    from rlft.config import load_config
    from rlft.rewards.builtin import char_fraction
    from rlft.models.loading import load_model_and_tokenizer, lora_config
    from rlft.stages.common.prompt_data import load_prompt_dataset
    from rlft.stages.grpo.runner import grpo_trl_config
    from rlft.trainers.grpo import RlftGRPOTrainer

    cfg, _, _ = load_config("grpo", "cpu", [DEMO], overrides + ["train.save_steps=100000"])
    if isinstance(cfg.hw.cpu_threads, int):
        import torch

        torch.set_num_threads(cfg.hw.cpu_threads)
    model, tok = load_model_and_tokenizer(cfg)
    args = grpo_trl_config(cfg, out)
    common = dict(model=model, reward_funcs=[char_fraction], args=args, train_dataset=load_prompt_dataset(cfg),
                  processing_class=tok, peft_config=lora_config(cfg, model), callbacks=[timer.callback])
    if kind == "trl":
        if cfg.grpo.kl_penalty_coef > 0:
            args.beta = cfg.grpo.kl_penalty_coef  # TRL's own KL: k3 in the loss
        return GRPOTrainer(**common)
    return RlftGRPOTrainer(cfg=cfg, **common)


def run_child(kind: str, overrides: list[str], steps: int) -> dict:
    """One training in this process: its step times and peak RSS (KiB)."""
    import resource

    from transformers.trainer_callback import PrinterCallback

    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        trainer = build(kind, overrides + [f"train.max_steps={steps}"], out, timer)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return {"times": timer.times, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def compare(name: str, overrides: list[str], rounds: int, steps: int, warmup: int = 2) -> tuple[float, float]:
    import subprocess

    times = {"trl": [], "rlft": []}
    rss = {"trl": [], "rlft": []}
    for r in range(rounds):
        for kind in (("trl", "rlft") if r % 2 == 0 else ("rlft", "trl")):  # alternate who goes first
            proc = subprocess.run([sys.executable, __file__, "--child", kind, "--steps", str(steps), *overrides],
                                  capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                raise SystemExit(f"{kind} run failed:\n{proc.stderr[-3000:]}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            times[kind].extend(result["times"][warmup:])
            rss[kind].append(result["peak_rss_kib"])
    med = {k: statistics.median(v) for k, v in times.items()}
    peak = {k: statistics.median(v) for k, v in rss.items()}
    ratio, rss_ratio = med["rlft"] / med["trl"], peak["rlft"] / peak["trl"]
    print(f"{name:<44} TRL {med['trl'] * 1000:7.1f} ms/step {peak['trl'] / 1024:7.0f} MiB   rlft "
          f"{med['rlft'] * 1000:7.1f} "
          f"ms/step {peak['rlft'] / 1024:7.0f} MiB   time ratio {ratio:.3f}   RSS ratio {rss_ratio:.3f}   "
          f"({len(times['trl'])} steps, {rounds} runs each)", flush=True)
    return ratio, rss_ratio


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--model", default=None, help="model folder (default: rlft's tiny model)")
    p.add_argument("--child", choices=["trl", "rlft"], help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", help="extra KEY=VALUE config overrides for both trainers")
    a = p.parse_args()
    extra = list(a.overrides) + ([f"model.name_or_path={a.model}"] if a.model else [])
    if a.child:
        print(json.dumps(run_child(a.child, extra, a.steps)))
        return 0
    base = ["grpo.baseline_mode=group_mean", "grpo.kl_penalty_coef=0"]
    kl = ["grpo.baseline_mode=group_mean", "grpo.kl_penalty_coef=0.05", "grpo.kl_penalty_mode=advantage"]
    compare("group_mean, no KL (vs TRL beta=0)", base + extra, a.rounds, a.steps)
    compare("KL in advantage (vs TRL beta=0.05, k3 in loss)", kl + extra, a.rounds, a.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
