"""samples.jsonl of the sampled-SFT stages (RS-SFT, AWR): every sampled completion with its scores,
written as sampling goes so a killed run resumes after the last prompt written.

One row per completion:

    {"round": 1, "prompt_id": 7, "sample": 2, "prompt": "...", "completion": "...",
     "rewards": {"char_fraction": 0.75}, "total": 0.75}

Rows are appended one prompt batch at a time (all of a prompt's samples in one write, then flushed
and fsynced). When a round's sampling is complete, the stage's decision is added to its rows (RS-SFT:
`kept`; AWR: `advantage` and `weight`) and the file is rewritten atomically; a round whose rows
carry the decision is finished sampling, and training reads its rows back instead of sampling again.
A line cut short by a kill, and the rows of a prompt whose samples are incomplete, are dropped on
reading: that prompt is sampled again.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

from rlft.numeric import is_finite, is_number

DECISION_KEYS = ("kept", "weight")


def _prompt(v) -> bool:
    """Text, or chat messages (objects whose content is text)."""
    return isinstance(v, str) or isinstance(v, list) and all(
        isinstance(m, dict) and isinstance(m.get("content", ""), str) for m in v)


def is_sample_row(row) -> bool:
    """A row this stage wrote: integer round, prompt_id and sample, a text (or chat messages) prompt, a text
    completion, an object of number (or null) scores, a number (or null) total, and a decision of the right kind
    when it has one (`kept` true/false; `weight` a finite number, `advantage` one or null). What training and the
    completions log read of a row is of the kind they read."""
    def integer(v):
        return type(v) is int and v >= 0

    if not (isinstance(row, dict) and all(integer(row.get(k)) for k in ("round", "prompt_id", "sample"))):
        return False
    rewards = row.get("rewards")
    return _prompt(row.get("prompt")) and isinstance(row.get("completion"), str) \
        and isinstance(rewards, dict) and all(v is None or is_number(v) for v in rewards.values()) \
        and (row.get("total") is None or is_number(row.get("total"))) \
        and ("kept" not in row or isinstance(row["kept"], bool)) \
        and ("weight" not in row or is_finite(row["weight"])) \
        and (row.get("advantage") is None or is_finite(row["advantage"])) \
        and (row.get("finished") is None or isinstance(row["finished"], bool))


class SamplesLog:
    def __init__(self, path: Path, samples_per_prompt: int):
        self.path = Path(path)
        self.n = samples_per_prompt
        self.said = False  # the note about damaged lines is given once

    # -- reading ---------------------------------------------------------------------------------
    def read(self) -> list[dict]:
        """Every complete row; a truncated last line (killed mid-write) is skipped."""
        if not self.path.is_file():
            return []
        rows, damaged = [], []
        text = self.path.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                if i < len(lines) or text.endswith("\n"):  # not the line a kill cut short
                    damaged.append(i)
                continue
            if is_sample_row(row):  # a damaged row drops like a cut line: its prompt is sampled again
                rows.append(row)
            else:
                damaged.append(i)
        if damaged and not self.said:
            self.said = True
            shown = ", ".join(map(str, damaged[:5])) + (f" and {len(damaged) - 5} more" if len(damaged) > 5 else "")
            print(f"rlft: WARNING {self.path}: line(s) {shown} are not sample rows this stage wrote; left out (their "
                  f"prompt's samples count as incomplete: sampled again, or left out of a finished round)",
                  file=sys.stderr)
        return rows

    def round_rows(self, round_: int) -> list[dict]:
        """The rows of one round whose prompt has all its samples, ordered by (prompt_id, sample)."""
        by_prompt: dict[int, dict[int, dict]] = defaultdict(dict)
        for row in self.read():
            if row.get("round") == round_:
                by_prompt[row["prompt_id"]][row["sample"]] = row  # a prompt written twice: the last copy wins
        out = []
        for pid in sorted(by_prompt):
            group = by_prompt[pid]
            if sorted(group) == list(range(self.n)):
                out += [group[g] for g in range(self.n)]
        return out

    def prompts_done(self, round_: int) -> int:
        """How many prompts of the round are completely sampled (they are sampled in order)."""
        ids = sorted({r["prompt_id"] for r in self.round_rows(round_)})
        done = 0
        while done < len(ids) and ids[done] == done:
            done += 1
        return done

    def decided(self, round_: int) -> bool:
        """True when the round's sampling finished and its rows carry the stage's decision."""
        rows = self.round_rows(round_)
        return bool(rows) and all(any(k in r for k in DECISION_KEYS) for r in rows)

    # -- writing ---------------------------------------------------------------------------------
    def start_round(self, round_: int) -> int:
        """Drop this round's incomplete prompts (and anything after them); return the prompts done."""
        done = self.prompts_done(round_)
        earlier = [r for r in self.read() if r.get("round", 0) < round_]
        self._rewrite(earlier + [r for r in self.round_rows(round_) if r["prompt_id"] < done])
        return done

    def append(self, rows: list[dict]) -> None:
        if not rows:
            return
        with open(self.path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
            f.flush()
            os.fsync(f.fileno())

    def decide(self, round_: int, decided_rows: list[dict]) -> None:
        """Replace the round's rows with `decided_rows` (the same rows plus the decision fields)."""
        others = [r for r in self.read() if r.get("round") != round_]
        self._rewrite(others + decided_rows)

    def _rewrite(self, rows: list[dict]) -> None:
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
