"""What a smoke run's folder must show once its stage has run: finished with its final model, every reward
function scoring most completions, the environment stepping. Reads the run's files only (no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlft.numeric import is_finite
from rlft import run_files

MOST = 0.5  # a reward must score more than this share of the completions it was asked about


@dataclass
class RunCheck:
    problems: list[str] = field(default_factory=list)  # one line each; none = passed
    tested: list[str] = field(default_factory=list)
    code: int = 0                                       # the exit code the problems call for

    def fail(self, code: int, line: str) -> None:
        self.problems.append(line)
        self.code = max(self.code, code)


def read_rows(path: Path) -> list[dict]:
    from rlft.monitor.report.load import read_jsonl

    return read_jsonl(path)[0] if path.is_file() else []


def _failing(logs: list[dict]) -> list[tuple[str, int, str | None]]:
    """(reward, errors, last error) from reward_logs.jsonl, as the failure guard names them."""
    errors: dict[str, int] = {}
    last: dict[str, str] = {}
    for row in logs:
        name, n = row.get("reward"), row.get("errors")
        if isinstance(name, str) and isinstance(n, int) and n > 0:
            errors[name] = errors.get(name, 0) + n
            if isinstance(row.get("error"), str) and row["error"].strip():
                last[name] = row["error"].strip().splitlines()[0]
    return [(name, n, last.get(name)) for name, n in errors.items()]


def check_rewards(rows: list[dict], logs: list[dict], max_failure_fraction: float, out: RunCheck) -> None:
    """Every reward scores most of the completions it was asked about (null = no score); the share of completions
    without a total stays within monitor.max_reward_failure_fraction, whose guard a smoke run's few completions
    would not reach: above it, the guard's own message and exit code (4)."""
    from rlft.rewards.safe import failure_message

    asked: dict[str, int] = {}
    scored: dict[str, int] = {}
    for row in rows:
        rewards = row.get("rewards")
        if not isinstance(rewards, dict):
            continue
        for name, value in rewards.items():
            asked[name] = asked.get(name, 0) + 1
            scored[name] = scored.get(name, 0) + is_finite(value)
    seen = sum("total" in row for row in rows)
    unscored = sum("total" in row and not is_finite(row["total"]) for row in rows)
    if seen and unscored / seen > max_failure_fraction:
        out.fail(4, f"stopped: {failure_message(unscored, seen, max_failure_fraction, _failing(logs))} (a real run "
                    f"stops here with exit 4 once {_guard_minimum()} completions are scored; this one scored {seen})")
    for name, n in asked.items():
        if scored[name] <= MOST * n:
            out.fail(1, f"reward `{name}` returned a number for {scored[name]} of {n} completions (its errors are in "
                        f"reward_logs.jsonl)")
    out.tested.append("rewards: " + ", ".join(f"{name} scored {scored[name]}/{n}" for name, n in asked.items()))


def _guard_minimum() -> int:
    import inspect

    from rlft.rewards.safe import RewardSuite

    return inspect.signature(RewardSuite).parameters["min_completions"].default


def check_episodes(rows: list[dict]) -> tuple[list[str], str]:
    """(problems, a line for `tested`): the environment took steps that were not faults."""
    turns = [t for row in rows if isinstance(row.get("turns"), list) for t in row["turns"] if isinstance(t, dict)]
    steps = [t for t in turns if not t.get("fault") and is_finite(t.get("reward"))]
    episodes = sum(isinstance(row.get("turns"), list) for row in rows)
    if not steps:
        faults = sorted({str(t.get("fault"))[:120] for t in turns if t.get("fault")})
        return ([f"the environment never stepped: {episodes} episodes, {len(turns)} turns, none without a fault"
                 + (f" ({'; '.join(faults[:2])})" if faults else "")],
                f"environment: {episodes} episodes")
    return [], f"environment: {episodes} episodes, {len(steps)} of {len(turns)} turns stepped without a fault"


def check_run(run_root: Path, samples: bool, env: bool, max_failure_fraction: float = 0.5) -> RunCheck:
    """The checks of one run folder: `samples` = the stage samples and scores completions; `env` = episodes."""
    from rlft.monitor.summary import read_summary

    out = RunCheck()
    summary = read_summary(run_root / run_files.SUMMARY)
    if summary is None:
        out.fail(1, "no summary.json")
        return out
    if summary.get("status") != "finished":
        error = f": {summary['error']}" if summary.get("error") else ""
        out.fail(int(summary.get("exit_code") or 1), f"{summary.get('status')} at step {summary.get('steps')}{error}")
    if not (run_root / run_files.FINAL).is_dir():
        out.fail(1, "no final/ model")
    if not samples:
        return out
    rows = read_rows(run_root / run_files.COMPLETIONS)
    if not rows:
        out.fail(1, "no completions were logged")
        return out
    if env:
        problems, line = check_episodes(rows)
        for p in problems:
            out.fail(1, p)
        out.tested.append(line)
        return out
    rendered = next((r["prompt_rendered"] for r in rows if isinstance(r.get("prompt_rendered"), str)), None)
    if rendered is not None:
        out.tested.append(f"prompt as the model saw it: {rendered[:80]!r}")
    check_rewards(rows, read_rows(run_root / run_files.REWARD_LOGS), max_failure_fraction, out)
    return out
