#!/usr/bin/env python
"""Write the reward-model demo's preference pairs: configs/examples/data/rm_prefs.jsonl.

The task is the GRPO demo's "repeat the letter z" (see :mod:`rlft.data.demo`), as graded pairs: both answers are
runs of letters and stray words like a policy's early samples, and the chosen one holds more runs of z than the
rejected one, e.g.

    {"prompt": "Repeat the letter z: ", "chosen": "zzzz then zzzzqqqq", "rejected": "qqqq then zzzzqqqq"}

so a reward model trained on them scores "more of the letter" rather than one fixed string, and a policy optimised
against it learns what the demo's verifier (`char_fraction`) checks, without ever being scored by it
(configs/examples/rm_demo.yaml, pipeline_rlhf.yaml). The output is deterministic; rerun after changing the recipe
and commit the file.

    python scripts/make_rm_demo.py [--rows 256] [--seed 0] [--out PATH]
    python scripts/make_rm_demo.py --rows 32 --seed 1 --out configs/examples/data/rm_eval.jsonl   # held out
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlft.data.demo import demo_prompts  # noqa: E402

DEFAULT_OUT = ROOT / "configs" / "examples" / "data" / "rm_prefs.jsonl"
OTHER = "abcdefghijklmnopqrstuvwxy"
WORDS = (" the", " letter", " then", " xyz", " 12", " it", " an", " easy", " and", "?", " y")


def chunk(rng: random.Random, letter: str | None) -> str:
    """A run of `letter` (or of another letter, or a stray word when None)."""
    if letter is None:
        return rng.choice(WORDS) if rng.random() < 0.4 else rng.choice(OTHER) * rng.randint(2, 8)
    return letter * rng.randint(2, 8)


def pair_rows(n: int = 256, seed: int = 0) -> list[dict[str, str]]:
    """``n`` rows {prompt, chosen, rejected, target}: answers of 1-4 chunks; the chosen one has more runs of the
    target letter than the rejected one (which may have none)."""
    rng = random.Random(seed)
    rows = []
    for row in demo_prompts(n=n, seed=seed):
        c, size = row["target"], rng.randint(1, 4)
        good = rng.randint(1, size)
        bad = rng.randint(0, good - 1)

        def answer(k):
            chunks = [chunk(rng, c) for _ in range(k)] + [chunk(rng, None) for _ in range(size - k)]
            rng.shuffle(chunks)
            return "".join(chunks)

        rows.append({"prompt": row["prompt"], "chosen": answer(good), "rejected": answer(bad), "target": c})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    opts = parser.parse_args()
    rows = pair_rows(opts.rows, opts.seed)
    opts.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
