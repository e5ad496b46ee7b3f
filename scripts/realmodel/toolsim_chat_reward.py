"""Reward for the real-model tool agent's ORPO eval: a completion is scored as the first action of the toolsim
chat episode its row stands for (the row's `task_id` and `env_seed` rebuild the task), 1.0 when that action
completes the task. The PPO stage measures whole episodes with the env itself."""

from rlft.envs.toolsim import ToolSim


def first_action_success(prompts, completions, task_id, env_seed, **kwargs):
    """1.0 when the completion, as the episode's first action, completes the task (toolsim's `success`)."""
    scores = []
    for completion, task, seed in zip(completions, task_id, env_seed):
        env = ToolSim(variant="chat", steps=1)
        env.reset({"task_id": int(task)}, int(seed))
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        scores.append(float(env.step(text)[3].get("success", False)))
    return scores


first_action_success.required_columns = ["task_id", "env_seed"]
