"""Overhead of rlft's GRPO hooks over stock TRL GRPOTrainer, on the same tiny model, data and settings.

Runs short trainings of plain `trl.GRPOTrainer` and rlft's `RlftGRPOTrainer` alternately in one process
and prints the median step time of each and their ratio, for two comparisons:
  1. rlft `group_mean`, no KL            vs TRL (beta = 0)
  2. rlft `kl_penalty_mode: advantage`   vs TRL with beta > 0 (k3 KL in the loss)

    python scripts/bench_grpo_overhead.py [--rounds 3] [--steps 12]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")


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
    from rlft.demo import char_fraction
    from rlft.models.loading import load_model_and_tokenizer, lora_config
    from rlft.stages.grpo import grpo_trl_config, load_prompt_dataset
    from rlft.trainers.grpo import GRPOHooks, RlftGRPOTrainer

    cfg, _, _ = load_config("grpo", "cpu", ["configs/examples/grpo_demo.yaml"], overrides + ["train.save_steps=100000"])
    model, tok = load_model_and_tokenizer(cfg)
    args = grpo_trl_config(cfg, out)
    common = dict(model=model, reward_funcs=[char_fraction], args=args, train_dataset=load_prompt_dataset(cfg),
                  processing_class=tok, peft_config=lora_config(cfg, model), callbacks=[timer.callback])
    if kind == "trl":
        if cfg.grpo.kl_penalty_coef > 0:
            args.beta = cfg.grpo.kl_penalty_coef  # TRL's own KL: k3 in the loss
        return GRPOTrainer(**common)
    g = cfg.grpo
    hooks = GRPOHooks(group_size=g.group_size, baseline_mode=g.baseline_mode, kl_penalty_mode=g.kl_penalty_mode,
                      kl_penalty_coef=g.kl_penalty_coef, kl_discount_factor=g.kl_discount_factor,
                      adaptive_kl=g.adaptive_kl, target_kl=g.target_kl)
    return RlftGRPOTrainer(hooks=hooks, **common)


def compare(name: str, overrides: list[str], rounds: int, steps: int, warmup: int = 2) -> float:
    times = {"trl": [], "rlft": []}
    for r in range(rounds):
        for kind in (("trl", "rlft") if r % 2 == 0 else ("rlft", "trl")):  # alternate who goes first
            timer = StepTimer()
            with tempfile.TemporaryDirectory() as out:
                trainer = build(kind, overrides + [f"train.max_steps={steps}"], out, timer)
                from transformers.trainer_callback import PrinterCallback

                trainer.remove_callback(PrinterCallback)
                trainer.train()
            times[kind].extend(timer.times[warmup:])
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["rlft"] / med["trl"]
    print(f"{name:<44} TRL {med['trl'] * 1000:7.1f} ms/step   rlft {med['rlft'] * 1000:7.1f} ms/step   "
          f"ratio {ratio:.3f}   ({len(times['trl'])} steps each)", flush=True)
    return ratio


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    a = p.parse_args()
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    base = ["grpo.baseline_mode=group_mean", "grpo.kl_penalty_coef=0"]
    kl = ["grpo.baseline_mode=group_mean", "grpo.kl_penalty_coef=0.05", "grpo.kl_penalty_mode=advantage"]
    compare("group_mean, no KL (vs TRL beta=0)", base, a.rounds, a.steps)
    compare("KL in advantage (vs TRL beta=0.05, k3 in loss)", kl, a.rounds, a.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
