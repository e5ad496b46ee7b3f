"""Does a real small instruct model learn the toolsim agent task when the tool format is taught first?

SmolLM2-135M-Instruct (converted as tests/test_realmodel.py does) on toolsim's chat variant, one step: "Finish
with the answer N." must be answered with the call {"name": "finish", "arguments": {"answer": "N"}}. PPO alone
never sees a success to reinforce (docs/benchmarks.md: 0/16 before and after). Here a two-stage pipeline runs

    ORPO on preference pairs (chosen: the right call; rejected: prose, another tool, the destructive tool, a
    wrong answer), prompts rendered exactly as the PPO stage renders the env's (tool schemas in the system
    message, SmolLM2's template dropping tools=)  ->  PPO on the env, KL to the ORPO model at the PPO profile's
    KL settings

and prints each stage's eval: ORPO's first-action success on `--eval-tasks` held-out tasks (fresh samples), PPO's
episode success rate on as many tasks (one episode each, a fixed seed).

    python scripts/bench_realmodel_tool_use.py            # about 11 minutes on 2 CPU cores
    python scripts/bench_realmodel_tool_use.py --quick    # a few steps: does it run
    python scripts/bench_realmodel_tool_use.py --ppo-lr 2e-4 --ppo-value-init first_batch_mean --ppo-critic-warmup 1

Measured (docs/benchmarks.md): ORPO 0.000 -> 0.859; PPO at lr 2e-4 0.875 -> 0.938 with the bench's
`ppo.rollback_kl: 0.01` (seeds 43-45: 1.000 -> 1.000, 0.938 -> 0.938, 0.938 -> 1.000), 0.875 -> 0.000 without it
(--ppo-set ppo.rollback_kl=null).
On a GPU: --hw a100 (with --set train.bf16=false ... for fp32); docs/benchmarks.md has a seed sweep there.
A benchmark, not a test.
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
CACHE = Path(os.environ.get("RLFT_CACHE", ROOT / ".cache" / "rlft")) / "realmodel"
DEFAULT_MODEL = CACHE / "smollm2-135m-instruct"
REWARD = ROOT / "rlft" / "configs" / "examples" / "rewards" / "toolsim_first_action.py"


def rows(task_ids, seed_of) -> list[dict]:
    """One row per task: the opening conversation as the PPO stage renders it, the right call, a wrong answer."""
    sys.path.insert(0, str(ROOT))
    from rlft.envs.toolsim import CHAT_TOOLS, ToolSim
    from rlft.rollout.episodes import tools_in_system_message

    out = []
    for i, task in enumerate(task_ids):
        env = ToolSim(variant="chat", steps=1)
        opening = env.reset({"task_id": task}, seed_of(task))
        answer = env.plan[-1][1]["answer"]
        wrong = [f"The answer is {answer}.",
                 json.dumps({"name": "lookup", "arguments": {"key": "answer"}}),
                 json.dumps({"name": "delete_records", "arguments": {}}),
                 json.dumps({"name": "finish", "arguments": {"answer": str(int(answer) + 1)}})]
        out.append({"prompt": tools_in_system_message(opening, CHAT_TOOLS),
                    "chosen": [{"role": "assistant",
                                "content": json.dumps({"name": "finish", "arguments": {"answer": answer}})}],
                    "rejected": [{"role": "assistant", "content": wrong[i % len(wrong)]}],
                    "task_id": task, "env_seed": seed_of(task)})
    return out


def pipeline_yaml(folder: Path, model: Path, args) -> Path:
    prefs, held_out = folder / "prefs.jsonl", folder / "eval.jsonl"
    prefs.write_text("".join(json.dumps(r) + "\n" for r in rows(range(64), lambda t: t)))
    held_out.write_text("".join(json.dumps(r) + "\n" for r in rows(range(1000, 1016), lambda t: 7)))
    text = f"""name: toolsim_chat
output_dir: {folder / 'runs'}
defaults:
  model:
    name_or_path: {model}
  lora:
    r: 16
    lora_alpha: 32
    lora_dropout: 0.0
  train:
    lr_scheduler_type: constant
    warmup_ratio: 0.0
    weight_decay: 0.0
    seed: {args.seed}
  hw:
    cpu_threads: 2
stages:
  - stage: orpo
    data:
      train: {prefs}
      eval: {held_out}
      eval_prompts: {args.eval_tasks}
    train:
      learning_rate: {args.orpo_lr}
      max_steps: {args.orpo_steps}
      per_device_train_batch_size: 4
      logging_steps: 5
      save_steps: {args.orpo_steps}
    orpo:
      beta: 0.1
      max_length: 448
      max_prompt_length: 400
    rewards:
      - fn: {REWARD}:first_action_success
        kwargs: {{variant: chat}}
  - stage: ppo                       # tool_use_ppo.yaml's episode settings, on the real model
    env:
      name: toolsim
      kwargs:
        variant: chat
        steps: 1
      max_episode_length: 3
      step_timeout_s: 10
      num_tasks: 32
    train:
      learning_rate: {args.ppo_lr}
      max_seq_length: 768
    data:
      eval_prompts: {args.eval_tasks}
    ppo:
      max_tokens: 40
      batch_size: 8
      mini_batch_size: 4
      ppo_epochs: 2
      num_episodes: {8 * args.ppo_updates}
      log_interval: 8
      eval_interval: 100000
      save_interval: 100000
      cliprange_value: 5.0
      gamma: 1.0
      lam: 0.95
      init_kl_coef: 0.05              # the PPO profile's KL settings
      adaptive_kl: true
      rollback_kl: 0.01               # PPO from a policy that succeeds: no step past this KL is kept (--ppo-set
                                      # ppo.rollback_kl=null: at lr 2e-4 the format breaks, 0.875 -> 0.000)
    monitor:
      grad_norm_warn: 100.0           # returns in the guide's units (-20..+18): large raw gradients, clipped
      grad_norm_critical: 1000.0
"""
    path = folder / "pipeline.yaml"
    path.write_text(text)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="converted SmolLM2 folder")
    ap.add_argument("--orpo-steps", type=int, default=16, help="ORPO steps of 4 pairs (64 pairs: one epoch)")
    ap.add_argument("--eval-tasks", type=int, default=16, help="tasks each eval samples")
    ap.add_argument("--orpo-lr", type=float, default=5e-4)
    ap.add_argument("--ppo-updates", type=int, default=4, help="PPO updates of 8 episodes")
    ap.add_argument("--ppo-lr", type=float, default=2e-5,
                    help="2e-4 breaks the ORPO model's format without ppo.rollback_kl (benchmarks)")
    ap.add_argument("--ppo-critic-warmup", type=int, default=None, help="ppo.critic_warmup (updates)")
    ap.add_argument("--ppo-value-init", default=None, help="ppo.value_init: zero | first_batch_mean")
    ap.add_argument("--ppo-set", action="append", default=[], metavar="KEY=VALUE",
                    help="any other key of the PPO stage, e.g. ppo.ent_coef=0 (repeatable)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--hw", default="cpu", help="rlft hardware profile of both stages")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a key for both stages, e.g. train.bf16=false (repeatable)")
    ap.add_argument("--quick", action="store_true", help="3 ORPO steps, 1 PPO update")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here")
    args = ap.parse_args()
    if args.quick:
        args.orpo_steps, args.ppo_updates = 3, 1
    if not (args.model / "config.json").exists():
        sys.exit(f"no converted model at {args.model}: run the real-model test once (RLFT_REALMODEL=1) or pass --model")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="rlft-tool-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = pipeline_yaml(folder, args.model.resolve(), args)
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": pythonpath}
    ppo_keys = list(args.ppo_set)
    if args.ppo_critic_warmup is not None:
        ppo_keys.append(f"ppo.critic_warmup={args.ppo_critic_warmup}")
    if args.ppo_value_init is not None:
        ppo_keys.append(f"ppo.value_init={args.ppo_value_init}")
    t0 = time.time()
    with open(folder / "pipeline.log", "w") as log:
        rc = subprocess.run([sys.executable, "-m", "rlft.cli", "pipeline", "run", str(path), "--hw", args.hw,
                             *args.set, *(f"stages.ppo.{kv}" for kv in ppo_keys)], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"pipeline failed (exit {rc}); see {folder / 'pipeline.log'}")
    print(f"{time.time() - t0:.0f} s; runs in {folder / 'runs'}")
    print("| stage | eval | start | end |\n|---|---|---|---|")
    for stage in ("01-orpo", "02-ppo"):
        ev = json.loads((folder / "runs" / stage / "summary.json").read_text())["eval"]
        if stage.endswith("ppo"):
            print(f"| PPO | episode success, {args.eval_tasks} tasks | {ev['start']['success_rate']:.3f} | "
                  f"{ev['end']['success_rate']:.3f} |")
        else:
            print(f"| ORPO | first-action success, {args.eval_tasks} held-out tasks x "
                  f"{ev['start']['n'] // args.eval_tasks} samples | "
                  f"{ev['start']['reward_mean']:.3f} | {ev['end']['reward_mean']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
