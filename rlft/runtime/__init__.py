"""The run lifecycle shared by every stage (`RunContext`, in context.py; the order of a stage's parts around it,
lifecycle.py) and its parts, one job a module:
process.py (logs, trackers, threads, seed), interrupt.py (signals), resume_plan.py (what --resume does, decided
from the run folder's files; no torch), resume.py (doing it), resume_config.py (a changed config),
resume_logs.py (rows trained again), checkpoint_files.py (is a checkpoint whole; rlft_state.json),
saved_state.py (the state a trainer keeps in it), final.py (the final model), ranks.py, outcome.py (exit codes),
run_summary.py (summary.json)."""

from rlft.runtime.checkpoint_files import RLFT_STATE, checkpoint_problem, read_rlft_state
from rlft.runtime.context import RunContext
from rlft.runtime.process import quiet_libraries, tracker_env
from rlft.rundir.resume_keys import RESUME_BREAKING
from rlft.runtime.resume_config import breaking_changes
from rlft.runtime.resume_logs import drop_rows_after
from rlft.runtime.resume_plan import ResumePlan, plan_resume

__all__ = ["RESUME_BREAKING", "RLFT_STATE", "ResumePlan", "RunContext", "breaking_changes", "checkpoint_problem",
           "drop_rows_after", "plan_resume", "quiet_libraries", "read_rlft_state", "tracker_env"]
