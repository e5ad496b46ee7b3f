#!/usr/bin/env python
"""Write rlft's built-in preference demo data: configs/examples/data/preference_demo.jsonl.

The task is the GRPO demo's "repeat a letter" (see :mod:`rlft.data.demo`) as preference pairs: the
chosen answer repeats the prompt's letter, the rejected one repeats another letter, e.g.

    {"prompt": "Repeat the letter a: ", "chosen": "aaaa", "rejected": "bbbb"}

The tiny model learns it with LoRA + DPO or ORPO in a few dozen CPU steps, which is what the
examples configs/examples/dpo_demo.yaml and orpo_demo.yaml and the end-to-end tests rely on.
The output is deterministic; rerun after changing the recipe and commit the file.

    python scripts/make_preference_demo.py [--rows 64] [--seed 0] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlft.data.demo import DEMO_LETTERS, demo_prompts  # noqa: E402

DEFAULT_OUT = ROOT / "configs" / "examples" / "data" / "preference_demo.jsonl"


def preference_rows(n: int = 64, seed: int = 0) -> list[dict[str, str]]:
    """``n`` rows {prompt, chosen, rejected}: chosen repeats the target letter 4-6 times, rejected
    repeats a different letter as often."""
    rng = random.Random(seed)
    rows = []
    for row in demo_prompts(n=n, seed=seed):
        c = row["target"]
        other = rng.choice([x for x in DEMO_LETTERS if x != c])
        k = rng.randint(4, 6)
        rows.append({"prompt": row["prompt"], "chosen": c * k, "rejected": other * k})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        for row in preference_rows(args.rows, args.seed):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {args.rows} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
