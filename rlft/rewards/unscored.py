"""`Unscored`: what a reward function returns for a completion it could not score, with why.

`SafeReward` counts it as it counts a reward's other failures (rlft/rewards/safe.py: no score, logged once per
kind, toward the failure guard), naming the reason, where a bare None would only say "non-numeric value".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unscored:
    kind: str    # one line per kind is logged (e.g. "timed out")
    reason: str  # what happened to this completion

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"
