"""Reward for the staged tool-use demo's single-turn stages (ORPO's eval, RS-SFT): a completion is scored as the
opening turn of the toolsim episode its row stands for, with toolsim's own reward table (the PPO stage's units).

Each data row carries the `task_id` and `env_seed` the prompt was generated from (scripts/bench_staged_tool_use.py
--write-data builds the rows by calling ToolSim.reset), so the same task is rebuilt here and the completion is the
episode's first action: "f" on a "Call f." task scores 17.5 (step -0.5, schema +2, style +1, correct tool +5,
task complete +10), another known tool -0.5, a non-call -5.5, the forbidden "x" -10.5. `variant: chat` (a reward
kwarg) scores toolsim's chat variant the same way (scripts/bench_realmodel_tool_use.py).
"""

from rlft.envs.toolsim import ToolSim


def _text(completion):
    return completion if isinstance(completion, str) else completion[-1]["content"]


def _first_step(completion, task_id, env_seed, steps, max_turns, variant):
    env = ToolSim(variant=variant, steps=steps)
    env.max_episode_length = max_turns
    env.reset({"task_id": int(task_id)}, int(env_seed))
    _, reward, _, info = env.step(_text(completion))
    return sum(reward.values()), bool(info.get("success"))


def first_action_return(prompts, completions, task_id, env_seed, steps=1, max_turns=3, variant="tiny", **kwargs):
    """The toolsim reward of the completion as the episode's first action."""
    return [_first_step(c, t, s, steps, max_turns, variant)[0] for c, t, s in zip(completions, task_id, env_seed)]


def first_action_success(prompts, completions, task_id, env_seed, steps=1, max_turns=3, variant="tiny", **kwargs):
    """1.0 when the completion, as the first action, completes the task (toolsim's `success`)."""
    return [float(_first_step(c, t, s, steps, max_turns, variant)[1])
            for c, t, s in zip(completions, task_id, env_seed)]


first_action_return.required_columns = ["task_id", "env_seed"]
first_action_success.required_columns = ["task_id", "env_seed"]
