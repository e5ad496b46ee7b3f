"""rounds.json, the state of a run whose stage resumes per round (RS-SFT, AWR): eval.start as measured before the
first round and the optimizer steps of each finished round ({"eval_start": {...}, "round_steps": {"1": 3, ...}}),
read once the run folder is open and rewritten after each change."""

from __future__ import annotations

import json

from rlft.errors import RunError
from rlft import run_files
from rlft.rundir.folder import RunDir

STATE_FILE = run_files.ROUNDS


def rounds_state_problem(state) -> str | None:
    """What is wrong with rounds.json's content, or None."""
    if not isinstance(state, dict):
        return f"holds {type(state).__name__}, not an object"
    if "eval_start" in state:
        from rlft.runtime.checkpoint_files import eval_result_problem

        start = state["eval_start"]
        problem = eval_result_problem(start)
        if problem is None and not isinstance(start.get("reward_mean"), (int, float)):
            problem = "has no reward_mean"  # the eval line and the summary read it
        if problem is not None:
            return f"has an eval_start {'that' if problem.startswith(('is ', 'has ')) else 'whose'} {problem}"
    steps = state.get("round_steps", {})
    if not isinstance(steps, dict) or not all(
            isinstance(k, str) and k.isdigit() and type(v) is int and v >= 0 for k, v in steps.items()):
        return "has round_steps that are not {round number: optimizer steps}"
    return None


def read_rounds_state(run: RunDir) -> dict:
    """The run's rounds.json ({} when there is none); one that does not read is a RunError naming it."""
    path = run.root / STATE_FILE
    if not path.is_file():
        return {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        problem = f"does not read as JSON ({type(exc).__name__})"
    else:
        problem = rounds_state_problem(state)
    if problem:  # the finished rounds' step counts cannot be guessed: said in one line, nothing trained yet
        raise RunError(f"cannot resume: {path} {problem}. It records the start eval and the optimizer steps of "
                       f"finished rounds: restore it, or start over with --overwrite")
    return state


def write_rounds_state(run: RunDir, state: dict) -> None:
    (run.root / STATE_FILE).write_text(json.dumps(state, indent=1))
