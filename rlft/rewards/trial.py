"""The numbers of a reward trial (`rlft rewards try`): per reward and for the weighted total, the score
statistics, failures with the first error, time per call, and how many prompts give no learning signal
(every sample of the prompt scored the same, so GRPO's group advantage is zero); a verdict line, and what
changed against scores logged before. Plain data in, text out: the scoring itself is the reward suite's."""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["CHANGE_TOLERANCE", "RewardStats", "Trial", "compare", "reward_stats"]

# logged scores went through float32 (GRPO's reward tensor) and 6-decimal rounding (completions.jsonl)
CHANGE_TOLERANCE = 1e-5
NO_SIGNAL_WARN = 0.5  # the verdict warns when more prompts than this fraction teach nothing
MAX_TRACEBACK_LINES = 40  # the end of a deep traceback is the part that names the bug


@dataclass
class RewardStats:
    name: str
    weight: float | None        # None for the total
    completions: int
    scores: list[float]         # the scored completions' values
    failures: int               # completions left without a score
    first_error: str | None     # message and traceback of the first failing call
    first_output: str | None    # what the first call that printed (or logged) anything printed
    call_ms: list[float]        # one per call
    prompts: int                # prompts with at least two scored samples (where signal can be measured)
    flat_prompts: int           # of those, prompts whose samples all scored the same

    def _get(self, fn):
        return fn(self.scores) if self.scores else None

    @property
    def mean(self) -> float | None:
        return self._get(statistics.fmean)

    @property
    def std(self) -> float | None:
        return self._get(statistics.pstdev)

    @property
    def min(self) -> float | None:
        return self._get(min)

    @property
    def max(self) -> float | None:
        return self._get(max)

    @property
    def ms_mean(self) -> float | None:
        return statistics.fmean(self.call_ms) if self.call_ms else None

    @property
    def ms_p95(self) -> float | None:
        if len(self.call_ms) < 2:
            return self.call_ms[0] if self.call_ms else None
        return statistics.quantiles(self.call_ms, n=20, method="inclusive")[-1]

    @property
    def constant(self) -> float | None:
        """The one value every scored completion got (None when they differ, or fewer than two were scored)."""
        if len(self.scores) >= 2 and max(self.scores) == min(self.scores):
            return self.scores[0]
        return None

    @property
    def no_signal(self) -> bool:
        """Every prompt that can show a difference scores all its samples the same (or every completion
        scores the same value)."""
        return self.constant is not None or (self.prompts > 0 and self.flat_prompts == self.prompts)


def reward_stats(name: str, values: Sequence[float | None], prompt_of: Sequence[Hashable],
                 call_ms: Sequence[float] = (), errors: Sequence[str] = (), outputs: Sequence[str] = (),
                 weight: float | None = None) -> RewardStats:
    """Statistics of one reward (or the total) over completions; `prompt_of` groups them by prompt, `call_ms`
    / `errors` / `outputs` hold one entry per call (an empty string where the call failed on nothing)."""
    groups: dict[Hashable, list[float]] = {}
    for value, key in zip(values, prompt_of):
        if value is not None:
            groups.setdefault(key, []).append(value)
    measured = [g for g in groups.values() if len(g) >= 2]
    return RewardStats(name=name, weight=weight, completions=len(values),
                       scores=[v for v in values if v is not None], failures=sum(v is None for v in values),
                       first_error=next((e for e in errors if e), None), first_output=next((o for o in outputs if o),
                                                                                           None),
                       call_ms=list(call_ms), prompts=len(measured),
                       flat_prompts=sum(max(g) == min(g) for g in measured))


def _num(x: float | None, width: int = 9) -> str:
    return f"{'-' if x is None else f'{x:.4g}':>{width}}"


def _indent(text: str, limit: int = MAX_TRACEBACK_LINES) -> list[str]:
    lines = text.rstrip().splitlines()
    if len(lines) > limit:
        lines = lines[:3] + [f"... {len(lines) - limit} lines left out ..."] + lines[-(limit - 3):]
    return ["    " + line for line in lines]


@dataclass
class Trial:
    rewards: list[RewardStats]
    total: RewardStats
    max_failure_fraction: float = 0.5   # monitor.max_reward_failure_fraction: where training would stop

    @property
    def unscored_fraction(self) -> float:
        return self.total.failures / self.total.completions if self.total.completions else 0.0

    def problems(self) -> list[str]:
        """What `--strict` refuses: a reward that failed, or a reward (or the total) without signal."""
        out = [f"reward {r.name!r} failed on {r.failures} of {r.completions} completions"
               for r in self.rewards if r.failures]
        out += [f"{'the total' if r is self.total else f'reward {r.name!r}'} has no signal"
                for r in [*self.rewards, self.total] if r.no_signal]
        return out

    def verdict(self) -> str:
        """One health-style line: [critical] failures, [warning] missing signal, else [ok]."""
        failing = [r for r in self.rewards if r.failures]
        warnings = []
        for r in self.rewards:
            if r.constant is not None:
                warnings.append(f"reward {r.name!r} gives every completion {r.constant:g}: it carries no signal")
            elif r.no_signal:
                warnings.append(f"reward {r.name!r} scores the samples of every prompt alike: no signal")
        t = self.total
        if t.prompts and t.flat_prompts > NO_SIGNAL_WARN * t.prompts:
            warnings.append(f"no signal on {t.flat_prompts} of {t.prompts} prompts: the reward is too coarse or the "
                            f"task too hard/easy")
        if failing:
            parts = [f"reward {r.name!r} failed on {r.failures} of {r.completions} completions" for r in failing]
            stop = (f", above monitor.max_reward_failure_fraction={self.max_failure_fraction:g}: training would stop"
                    if self.unscored_fraction > self.max_failure_fraction else "")
            parts[-1] += f" ({self.unscored_fraction:.0%} without a total{stop})"
            return "verdict [critical]: " + "; ".join(parts + warnings)
        if warnings:
            return "verdict [warning]: " + "; ".join(warnings)
        if not t.prompts:
            return ("verdict [ok]: no failures; no prompt has two scored completions, so the signal was not "
                    "measured (score several completions per prompt)")
        return f"verdict [ok]: signal on {t.prompts - t.flat_prompts} of {t.prompts} prompts, no failures"

    def table(self) -> list[str]:
        """One row per reward and the total; each column as wide as its widest cell plus two spaces, so a
        value of any size (a 30-second call: 3.004e+04 ms) never runs into its neighbour."""
        head = ["reward", "weight", "mean", "std", "min", "max", "failed", "ms/call", "p95 ms", "no signal (prompts)"]
        rows = [head]
        for r in [*self.rewards, self.total]:
            rows.append(["total (weighted)" if r is self.total else r.name,
                         "" if r.weight is None else f"{r.weight:g}",
                         *(_num(x, 0) for x in (r.mean, r.std, r.min, r.max)), f"{r.failures}/{r.completions}",
                         _num(r.ms_mean, 0), _num(r.ms_p95, 0),
                         f"{r.flat_prompts} of {r.prompts}" if r.prompts else "-"])
        widths = [max(len(row[c]) for row in rows) for c in range(len(head))]
        out = []
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:-1], widths[1:-1])]
            out.append("  ".join(cells) + "  " + row[-1])
        return out

    def details(self) -> list[str]:
        """The first error (with its traceback) of each failing reward, and what rewards printed."""
        lines = []
        for r in self.rewards:
            if r.first_error:
                lines.append(f"reward {r.name!r}: first error:")
                lines += _indent(r.first_error)
        for r in self.rewards:
            if r.first_output:
                lines.append(f"reward {r.name!r} printed (first call):")
                lines += _indent(r.first_output, 10)
        return lines


def _mean(values: Sequence[float | None]) -> float | None:
    scored = [v for v in values if v is not None]
    return statistics.fmean(scored) if scored else None


def _changed(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return (old is None) != (new is None)
    return abs(old - new) > CHANGE_TOLERANCE


def compare(names: Sequence[str], per_reward: Mapping[str, Sequence[float | None]], total: Sequence[float | None],
            logged_rewards: Sequence[Mapping[str,
                                             float | None] | None], logged_total: Sequence[float | None]) -> list[str]:
    """Lines saying, per reward and for the total, the logged mean against the mean now and how many
    completions changed score (a score that appeared or went away counts as a change)."""
    n = len(total)
    width = max(len("total (weighted)"), *(len(name) for name in names)) + 2
    lines = [f"compared with the logged scores ({n} completions):",
             f"  {'reward':<{width}} {'logged':>9} {'now':>9}  changed"]

    def row(label: str, old: list[float | None], new: Sequence[float | None]) -> str:
        diffs = [i for i in range(n) if _changed(old[i], new[i])]
        largest = max((abs(new[i] - old[i]) for i in diffs if old[i] is not None and new[i] is not None), default=None)
        more = "" if largest is None else f" (largest {largest:.4g})"
        return f"  {label:<{width}} {_num(_mean(old))} {_num(_mean(new))}  {len(diffs)} of {n}{more}"  # never joined

    for name in names:
        if not any(r is not None and name in r for r in logged_rewards):
            lines.append(f"  {name:<{width}} {'-':>9} {_num(_mean(per_reward[name]))}  new (not in the log)")
            continue
        lines.append(row(name, [(r or {}).get(name) for r in logged_rewards], per_reward[name]))
    lines.append(row("total (weighted)", list(logged_total), total))
    return lines
