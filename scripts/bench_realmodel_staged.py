"""Does a preference stage before GRPO pay on a real model? Staged (ORPO -> GRPO, or RM -> GRPO) against GRPO alone.

SmolLM2-135M-Instruct (converted as tests/test_realmodel.py does) on the addition task of
scripts/bench_realmodel_learning.py ("What is A + B? Answer with the number only.", A, B from 1 to 30, reward
scripts/realmodel/addition_reward.py:correct). For each seed, two arms with the same GRPO budget:

    A  rlft train --stage grpo  -c <the learning bench's GRPO config>                       (N steps)
    B  rlft train --stage orpo  -c <ORPO on preference pairs from the training split>       (M steps)
       rlft train --stage grpo  -c <the same GRPO config> model.init_from=<the ORPO run>     (N steps)
    C  rlft train --stage rm    -c <a reward model on the same kind of pairs>               (K steps)
       rlft train --stage grpo  -c <the GRPO config, its one reward `reward_model`: the RM>  (N steps)

The ORPO pairs come from training problems only: chosen is the sum alone (what the prompt asks for), rejected a
wrong sum (off by 1-10) or the right sum buried in prose. Arm C (RLHF) trains a reward model on such pairs, reports
its pairwise accuracy on pairs built the same way from the held-out problems (the rm stage's eval.end), then runs
GRPO from the base model against that reward model alone (the verifier never trains it). After every stage the
script measures greedy accuracy
on held-out problems (disjoint from the training ones), with the chat template applied as rlft applies it, and
the stage's wall time. The weights after a stage are rebuilt as rlft rebuilds an init_from chain: the base, each
earlier stage's final adapter merged in, in order.

    python scripts/bench_realmodel_staged.py                       # 2 seeds, the full budget (about an hour)
    python scripts/bench_realmodel_staged.py --seeds 1 --quick     # a few steps and 50 problems: does it run
    python scripts/bench_realmodel_staged.py --arms C              # RLHF only: RM -> GRPO against the RM

A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_realmodel_learning import (  # noqa: E402
    DEFAULT_MODEL, ROOT, TASKS, accuracy, load, problems, reward_trend, write_config,
)
from realmodel.addition_reward import is_number_only  # noqa: E402

RM_BATCH = 8  # preference pairs per rm step
ARM_NAMES = {"A": "GRPO alone", "B": "ORPO -> GRPO", "C": "RM -> GRPO vs RM"}


def preference_pairs(train_rows: list[dict], n: int, seed: int) -> list[dict]:
    """n pairs from training problems: chosen = the sum alone; rejected = a wrong sum (3 in 4) or prose."""
    rng = random.Random(f"pairs:{seed}")
    out = []
    for i, row in enumerate(train_rows[:n]):
        right = int(row["answer"])
        if i % 4 == 3:
            wrong = f"Sure! Let me think about it. The numbers add up to {right}, I believe."
        else:
            wrong = str(max(0, right + rng.choice([-1, 1]) * rng.randint(1, 10)))
        out.append({"prompt": row["prompt"], "chosen": str(right), "rejected": wrong})
    return out


# "sum" pairs: chosen and rejected in one format, differing only in the sum, so an RM can tell them apart by the
# sum alone (the "format" recipe's prose rejects teach an RM the format instead: reward hacking, docs/benchmarks.md)
SUM_FORMATS = ("{c}", "{a} + {b} = {c}", "The answer is {c}.", "{a} + {b} = {c}. The sum of {a} and {b} is {c}.")
_OPERANDS = re.compile(r"What is (\d+) \+ (\d+)\?")


def sum_pairs(rows: list[dict], n: int, seed: int) -> list[dict]:
    """n pairs: one format per pair (SUM_FORMATS in turn), chosen with the right sum, rejected with one off by 1-10."""
    rng = random.Random(f"sum-pairs:{seed}")
    out = []
    for i, row in enumerate(rows[:n]):
        a, b = (int(x) for x in _OPERANDS.search(row["prompt"]).groups())
        wrong = max(0, a + b + rng.choice([-1, 1]) * rng.randint(1, 10))
        form = SUM_FORMATS[i % len(SUM_FORMATS)]
        out.append({"prompt": row["prompt"], "chosen": form.format(a=a, b=b, c=a + b),
                    "rejected": form.format(a=a, b=b, c=wrong)})
    return out


# "instruction" pairs: the prompt says "Answer with the number only"; chosen is the right sum alone, rejected the
# same right sum in words the base model likes ("21 + 1 = 22"), so the one thing to learn is the instruction
WORDY_FORMATS = SUM_FORMATS[1:] + ("Sure! {a} plus {b} makes {c}.",)


def instruction_pairs(rows: list[dict], n: int, seed: int) -> list[dict]:
    """n pairs: chosen = the sum alone; rejected = the same sum in a wordy format (WORDY_FORMATS in turn)."""
    out = []
    for i, row in enumerate(rows[:n]):
        a, b = (int(x) for x in _OPERANDS.search(row["prompt"]).groups())
        out.append({"prompt": row["prompt"], "chosen": str(a + b),
                    "rejected": WORDY_FORMATS[i % len(WORDY_FORMATS)].format(a=a, b=b, c=a + b)})
    return out


RM_PAIRS = {"format": preference_pairs, "sum": sum_pairs, "instruction": instruction_pairs}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def orpo_config(folder: Path, pairs: list[dict], args) -> Path:
    data = write_jsonl(folder / "pairs.jsonl", pairs)
    cfg = folder / "orpo_addition.yaml"
    cfg.write_text(f"""# generated by scripts/bench_realmodel_staged.py
lora: {{r: 16, lora_alpha: 32, lora_dropout: 0.0}}
data:
  train: {data}
  eval_prompts: 0
rewards:
  - fn: {HERE / 'realmodel' / 'addition_reward.py'}:correct
train:
  learning_rate: {args.orpo_lr}
  lr_scheduler_type: constant
  warmup_ratio: 0.0
  weight_decay: 0.0
  max_steps: {args.orpo_steps}
  logging_steps: 1
  save_steps: 100000
  per_device_train_batch_size: 4
  gradient_accumulation_steps: 1
orpo:
  beta: 0.1
  max_length: 96
  max_prompt_length: 64
""")
    return cfg


def rm_config(folder: Path, pairs: list[dict], held_pairs: list[dict], args) -> Path:
    """The rm stage on training pairs; data.eval: pairs built the same way from the held-out problems."""
    data, held = write_jsonl(folder / "rm_pairs.jsonl", pairs), write_jsonl(folder / "rm_held_pairs.jsonl", held_pairs)
    cfg = folder / "rm_addition.yaml"
    cfg.write_text(f"""# generated by scripts/bench_realmodel_staged.py
lora: {{r: 16, lora_alpha: 32, lora_dropout: 0.0}}
data:
  train: {data}
  eval: {held}
train:
  learning_rate: {args.rm_lr}
  lr_scheduler_type: constant
  warmup_ratio: 0.0
  weight_decay: 0.0
  max_steps: {args.rm_steps}
  logging_steps: 1
  save_steps: 100000
  eval_steps: 100000
  per_device_train_batch_size: {RM_BATCH}
  gradient_accumulation_steps: 1
rm:
  max_length: 128
""")
    return cfg


def grpo_rm_config(grpo_cfg: Path, rm_run: Path, seed: int, kl: float = 0.0) -> Path:
    """The GRPO config with its one training reward swapped for the reward model of rm_run (and a KL penalty)."""
    text = grpo_cfg.read_text()
    if kl:
        assert "  kl_penalty_coef: 0.0\n" in text, "the GRPO config's KL line moved"
        text = text.replace("  kl_penalty_coef: 0.0\n", f"  kl_penalty_coef: {kl}\n")
    verifier = f"  - fn: {HERE / 'realmodel' / 'addition_reward.py'}:correct\n"
    assert verifier in text, "the GRPO config's reward line moved"
    cfg = grpo_cfg.with_name(f"grpo_rm_seed{seed}.yaml")
    cfg.write_text(text.replace(verifier, f"""  - fn: reward_model
    timeout_s: 300
    kwargs: {{path: {rm_run / 'final'}, batch_size: 32, device: cpu}}
"""))
    return cfg


def rm_held_accuracy(rm_run: Path) -> tuple[float, float]:
    """(start, end) pairwise accuracy on the held-out pairs, from the rm run's summary.json."""
    ev = json.loads((rm_run / "summary.json").read_text())["eval"]
    return ev["start"]["pairwise_accuracy"], ev["end"]["pairwise_accuracy"]


def merged_after(model_path: Path, runs: list[Path]):
    """The base with each run's final adapter merged in, in order (the init_from chain of `init_mode: merge`)."""
    from peft import PeftModel

    model, tok = load(model_path)
    for run in runs:
        model = PeftModel.from_pretrained(model, str(run / "final")).merge_and_unload()
    model.eval()
    return model, tok


def train(stage: str, cfg: Path, run: Path, model: Path, seed: int, extra: list[str]) -> float:
    cmd = [sys.executable, "-m", "rlft.cli", "train", "--stage", stage, "--hw", "cpu", "-c", str(cfg),
           f"model.name_or_path={model}", f"train.seed={seed}", f"train.output_dir={run}", "--overwrite", *extra]
    print("$ rlft " + " ".join(cmd[3:]), flush=True)
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode != 0 or not (run / "final").is_dir():
        print(res.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{stage} seed {seed}: rlft train exited {res.returncode}")
    return round(time.monotonic() - t0, 1)


def measure(model_path: Path, runs: list[Path], held: list[dict]) -> tuple[float, list[str]]:
    model, tok = merged_after(model_path, runs)
    acc, outs = accuracy(model, tok, held)
    del model
    return acc, outs


def compliance(outs: list[str]) -> float:
    """The share of greedy answers that are the number alone, as the prompt asks (right or wrong)."""
    return sum(map(is_number_only, outs)) / len(outs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="converted SmolLM2 folder")
    ap.add_argument("--task", choices=sorted(TASKS), default="add30")
    ap.add_argument("--seeds", default="1,2", help="train.seed values, comma-separated")
    ap.add_argument("--arms", default="A,B",
                    help="A = GRPO alone, B = ORPO -> GRPO, C = RM, then GRPO against the RM (RLHF)")
    ap.add_argument("--steps", type=int, default=20, help="GRPO steps per arm (the same in both)")
    ap.add_argument("--orpo-steps", type=int, default=32, help="ORPO steps of 4 pairs")
    ap.add_argument("--orpo-lr", type=float, default=2e-4)
    ap.add_argument("--rm-steps", type=int, default=32, help=f"reward-model steps of {RM_BATCH} pairs (arm C)")
    ap.add_argument("--rm-lr", type=float, default=2e-4)
    ap.add_argument("--rm-pairs", choices=sorted(RM_PAIRS), default="sum",
                    help="arm C's pairs: sum = one format, only the sum differs; format = the ORPO recipe's pairs")
    ap.add_argument("--grpo-kl", type=float, default=0.0, help="grpo.kl_penalty_coef (the learning bench's: 0)")
    ap.add_argument("--problems", type=int, default=200, help="held-out problems")
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=3, help="GRPO prompts per step")
    ap.add_argument("--group", type=int, default=8, help="GRPO completions per prompt")
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--lr", type=float, default=5e-4, help="GRPO learning rate")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--quick", action="store_true", help="2 GRPO steps, 4 ORPO and RM steps, 50 problems")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here")
    ap.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.orpo_steps, args.rm_steps, args.problems = 2, 4, 4, 50
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    arms = [a.strip().upper() for a in args.arms.split(",") if a.strip()]
    if not (args.model / "config.json").is_file():
        print(f"no converted model at {args.model}: run tests/test_realmodel.py once with RLFT_REALMODEL=1, "
              f"or pass --model", file=sys.stderr)
        return 2

    held, train_rows = problems(args.task, args.data_seed, args.problems)
    t0 = time.monotonic()
    acc_base, outs_base = measure(args.model, [], held)
    print(f"base: number only {compliance(outs_base):.3f}, greedy accuracy {acc_base:.3f} on "
          f"{len(held)} held-out problems ({time.monotonic() - t0:.0f} s); "
          f"e.g. {outs_base[:3]}", flush=True)

    results = []
    with tempfile.TemporaryDirectory(prefix="rlft-staged-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        grpo_cfg = write_config(workdir, train_rows, args)
        orpo_cfg = orpo_config(workdir, preference_pairs(train_rows, 4 * args.orpo_steps, args.data_seed), args)
        make_pairs = RM_PAIRS[args.rm_pairs]
        rm_cfg = rm_config(workdir, make_pairs(train_rows, RM_BATCH * args.rm_steps, args.data_seed),
                           make_pairs(held, len(held), args.data_seed), args)
        for seed in seeds:
            for arm in arms:
                row: dict = {"seed": seed, "arm": arm, "acc_base": acc_base, "comply_base": compliance(outs_base)}
                chain: list[Path] = []
                if arm == "B":
                    orpo_run = workdir / f"B-seed{seed}-orpo"
                    row["orpo_s"] = train("orpo", orpo_cfg, orpo_run, args.model, seed, [])
                    chain.append(orpo_run)
                    row["acc_after_orpo"], outs = measure(args.model, chain, held)
                    row["examples_after_orpo"] = outs[:5]
                    print(f"seed {seed} arm B: after ORPO {row['acc_after_orpo']:.3f} ({row['orpo_s']:.0f} s); "
                          f"e.g. {outs[:3]}", flush=True)
                run_cfg = grpo_cfg
                if arm == "C":
                    rm_run = workdir / f"C-seed{seed}-rm"
                    row["rm_s"] = train("rm", rm_cfg, rm_run, args.model, seed, [])
                    row["rm_acc_start"], row["rm_acc_held"] = rm_held_accuracy(rm_run)
                    run_cfg = grpo_rm_config(grpo_cfg, rm_run, seed, args.grpo_kl)
                    print(f"seed {seed} arm C: RM held-out pairwise accuracy {row['rm_acc_start']:.3f} -> "
                          f"{row['rm_acc_held']:.3f} ({row['rm_s']:.0f} s)", flush=True)
                grpo_run = workdir / f"{arm}-seed{seed}-grpo"
                extra = [f"model.init_from={chain[-1]}"] if chain else []
                row["grpo_s"] = train("grpo", run_cfg, grpo_run, args.model, seed, extra)
                chain.append(grpo_run)
                row["train_reward_first5"], row["train_reward_last5"], row["grpo_steps"] = reward_trend(grpo_run)
                row["acc_after_grpo"], outs = measure(args.model, chain, held)
                row["comply_after_grpo"] = compliance(outs)
                row["examples_after_grpo"] = outs[:5]
                results.append(row)
                print(f"seed {seed} arm {arm}: after GRPO {row['acc_after_grpo']:.3f}, number only "
                      f"{row['comply_base']:.3f} -> {row['comply_after_grpo']:.3f} ({row['grpo_s']:.0f} s), "
                      f"train reward {row['train_reward_first5']:.3f} -> {row['train_reward_last5']:.3f}; "
                      f"e.g. {outs[:3]}", flush=True)

    print(f"\ntask {args.task} {TASKS[args.task]}, {len(held)} held-out problems, greedy; GRPO {args.steps} steps x "
          f"{args.batch} prompts x {args.group} completions, lr {args.lr}; ORPO {args.orpo_steps} steps x 4 pairs, "
          f"lr {args.orpo_lr}; RM {args.rm_steps} steps x {RM_BATCH} {args.rm_pairs!r} pairs, lr {args.rm_lr}; "
          f"GRPO vs RM kl_penalty_coef {args.grpo_kl}")
    ab = [r for r in results if r["arm"] != "C"]
    if ab:
        print("| seed | arm | base | after ORPO | after GRPO | GRPO train reward, first 5 -> last 5 | ORPO s | "
              "GRPO s |")
        print("|---|---|---|---|---|---|---|---|")
    for r in ab:
        orpo = f"{r['acc_after_orpo']:.3f}" if "acc_after_orpo" in r else "-"
        print(f"| {r['seed']} | {ARM_NAMES[r['arm']]} | {r['acc_base']:.3f} | {orpo} | "
              f"{r['acc_after_grpo']:.3f} | {r['train_reward_first5']:.3f} -> {r['train_reward_last5']:.3f} | "
              f"{r.get('orpo_s', 0):.0f} | {r['grpo_s']:.0f} |")
    rlhf = [r for r in results if r["arm"] == "C"]
    if rlhf:
        print("| seed | arm | RM held-out pairwise accuracy | number only: base -> after GRPO | accuracy: base -> "
              "after GRPO | GRPO train reward (RM score), first 5 -> last 5 | RM s | GRPO s |")
        print("|---|---|---|---|---|---|---|---|")
    for r in rlhf:
        print(f"| {r['seed']} | {ARM_NAMES['C']} | {r['rm_acc_start']:.3f} -> {r['rm_acc_held']:.3f} | "
              f"{r['comply_base']:.3f} -> {r['comply_after_grpo']:.3f} | "
              f"{r['acc_base']:.3f} -> {r['acc_after_grpo']:.3f} | {r['train_reward_first5']:.3f} -> "
              f"{r['train_reward_last5']:.3f} | {r['rm_s']:.0f} | {r['grpo_s']:.0f} |")
    for arm in arms:
        accs = [r["acc_after_grpo"] for r in results if r["arm"] == arm]
        if accs:
            print(f"arm {arm}: mean held-out accuracy after GRPO {statistics.fmean(accs):.3f} over {len(accs)} seed(s)")
    if args.json:
        args.json.write_text(json.dumps({"task": args.task, "problems": len(held), "steps": args.steps,
                                         "orpo_steps": args.orpo_steps, "orpo_lr": args.orpo_lr, "lr": args.lr,
                                         "rm_steps": args.rm_steps, "rm_lr": args.rm_lr, "rm_batch": RM_BATCH,
                                         "base_examples": outs_base[:5], "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
