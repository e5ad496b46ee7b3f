"""Cost of one PPO update against one GRPO step: same tiny model, batch of 16 completions, 16 new tokens,
KL to the reference on in both, one optimizer step each (PPO: ppo_epochs 1, one minibatch of 16; GRPO: one
substep over 2 prompts x 8 completions). PPO pays one extra no-grad forward (rollout log-probs and values)
before its training pass; GRPO (TRL, on-policy) reuses the training pass for the old log-probs.

Runs the two alternately in one process and prints the median step time of each and their ratio.

    python scripts/bench_ppo_vs_grpo.py [--rounds 3] [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_grpo_overhead import StepTimer, build as build_grpo  # noqa: E402

GRPO = ["grpo.group_size=8", "grpo.batch_size=2", "grpo.max_tokens=16", "grpo.baseline_mode=group_mean",
        "grpo.kl_penalty_coef=0.05", "grpo.kl_penalty_mode=advantage", "train.per_device_train_batch_size=16"]
PPO = ["ppo.batch_size=16", "ppo.mini_batch_size=16", "ppo.ppo_epochs=1", "ppo.max_tokens=16",
       "ppo.init_kl_coef=0.05", "ppo.adaptive_kl=false", "ppo.save_interval=100000", "data.eval_prompts=0"]


def build_ppo(steps: int, out: str, timer: StepTimer):
    from peft import get_peft_model

    from rlft.config import load_config
    from rlft.models.loading import load_model_and_tokenizer, lora_config
    from rlft.models.value_head import PolicyWithValueHead, hidden_size_of
    from rlft.rewards import build_reward_suite
    from rlft.stages.ppo.runner import training_arguments
    from rlft.stages.common.prompt_data import load_prompt_dataset
    from rlft.trainers.ppo import RlftPPOTrainer

    cfg, _, _ = load_config("ppo", "cpu", ["configs/examples/ppo_demo.yaml"], PPO + [f"ppo.num_episodes={16 * steps}"])
    model, tok = load_model_and_tokenizer(cfg)
    wrapped = PolicyWithValueHead(get_peft_model(model, lora_config(cfg, model)), hidden_size_of(model))
    suite = build_reward_suite([vars(r) for r in cfg.rewards])
    return RlftPPOTrainer(model=wrapped, args=training_arguments(cfg, out), processing_class=tok,
                          cfg=cfg, train_rows=load_prompt_dataset(cfg).to_list(),
                          reward_suite=suite, callbacks=[timer.callback])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    import torch
    from transformers.trainer_callback import PrinterCallback

    torch.set_num_threads(1)  # as the demo configs run (hw.cpu_threads: 1)
    times = {"grpo": [], "ppo": []}
    for r in range(a.rounds):
        for kind in (("grpo", "ppo") if r % 2 == 0 else ("ppo", "grpo")):  # alternate who goes first
            timer = StepTimer()
            with tempfile.TemporaryDirectory() as out:
                if kind == "grpo":
                    trainer = build_grpo("rlft", GRPO + [f"train.max_steps={a.steps}"], out, timer)
                else:
                    trainer = build_ppo(a.steps, out, timer)
                trainer.remove_callback(PrinterCallback)
                trainer.train()
            times[kind].extend(timer.times[2:])  # the first steps warm caches up
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"GRPO step {med['grpo'] * 1000:7.1f} ms   PPO update {med['ppo'] * 1000:7.1f} ms   "
          f"ratio PPO/GRPO {med['ppo'] / med['grpo']:.3f}   ({len(times['grpo'])} / {len(times['ppo'])} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
