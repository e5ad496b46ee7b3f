"""Single-turn GRPO's samples through rlft's rollout layer: TRL's completions scored by rlft's reward suite
(gathered over processes), reward hot reload, and completions.jsonl rows of what was scored (rlft.trainers.grpo)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
from accelerate.utils import gather_object

from rlft import run_files
from rlft.data.messages import as_text
from rlft.rewards.safe import RewardSuite, SafeReward
from rlft.rollout import CompletionLog, RewardLog, score_texts
from rlft.rollout.score import ID_COLUMNS

if TYPE_CHECKING:
    from rlft.rundir.folder import RunDir

# dataset columns TRL hands over that are not reward inputs (`prompt_id`: rlft's row id, see stages.grpo)
NOT_REWARD_COLUMNS = ("prompt", "completion", "completion_ids", *ID_COLUMNS)


def _suite_from_funcs(funcs, names, weights) -> RewardSuite | None:
    """A never-stopping suite over TRL-style plain reward callables (trainers built without rlft's suite);
    None when a reward is a model or async, which only TRL's own scoring handles."""
    import inspect

    if any(isinstance(f, torch.nn.Module) or inspect.iscoroutinefunction(f) for f in funcs):
        return None
    return RewardSuite([SafeReward(n, f, float(w)) for f, n, w in zip(funcs, names, weights.tolist())],
                       max_failure_fraction=1.0)


class GRPORewards:
    """Mixed into rlft's GRPOTrainer subclass (before TRL's GRPOTrainer, whose `_calculate_rewards` it overrides)."""

    def _init_rewards(self, run: RunDir | None, reward_suite) -> None:
        mon = self.cfg.monitor
        self.reward_suite = reward_suite if reward_suite is not None else \
            _suite_from_funcs(self.reward_funcs, self.reward_func_names, self.reward_weights)
        self.completion_log = CompletionLog(run.completions if run is not None else None, mon.log_completions)
        self.reward_log = RewardLog(run.reward_logs if run is not None and mon.reward_logs else None)
        if self.reward_suite is not None:
            self.reward_suite.capture_logs(self.reward_log.path is not None)
        self.reloader = None
        if run is not None and mon.reward_hot_reload and self.reward_suite is not None:
            from rlft.rewards.reload import RewardReloader

            self.reloader = RewardReloader(self.reward_suite, run.root / run_files.OVERRIDES)
        self._batch_log: tuple[list, list, list] | None = None  # gathered (prompt ids, prompts, completions)
        self._rendered_seen: set = set()  # prompt ids whose rendered prompt completions.jsonl already holds

    # --- rewards ---------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """This process's completions scored by the shared scorer, gathered over processes: (N_all, F),
        NaN = no score. The failure guard counts the gathered batch later, once, on every rank."""
        if self.reward_suite is None:
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        else:
            columns = {k: [ex[k] for ex in inputs] for k in inputs[0] if k not in NOT_REWARD_COLUMNS}
            # for the rewards that name them (overlong_penalty): sampled token counts (EOS included) and the budget
            columns["completion_lengths"] = [len(ids) for ids in completion_ids_list]
            columns["max_tokens"] = [self.max_completion_length] * len(completion_ids_list)
            if self.reloader is not None:
                self.reloader.remember([as_text(p) for p in prompts], [as_text(c) for c in completions], columns)
            scores = score_texts(self.reward_suite, prompts, completions, columns, count=False)
            rewards = self.accelerator.gather(scores.per_reward_tensor(device=self.accelerator.device))
        self._rewards_per_func = rewards
        # this process's sampled token counts and cut-at-max_tokens flags, as TRL counts them (dynamic sampling
        # recomputes TRL's length metrics on the rows it keeps)
        ends = [*self.eos_token_ids, self._tokenizer.pad_token_id]
        self._completion_lengths = [len(ids) for ids in completion_ids_list]
        self._completion_truncated = [bool(len(ids)) and ids[-1] not in ends for ids in completion_ids_list]
        self._batch_log = None
        if self.completion_log.enabled and self.model.training:
            ids = [ex.get("prompt_id") for ex in inputs]
            self._batch_log = (gather_object(ids), gather_object([as_text(p) for p in prompts]),
                               gather_object([as_text(c) for c in completions]))
        return rewards

    @property
    def reward_version(self) -> int:
        return self.reloader.version if self.reloader is not None else 1

    def _reload_rewards(self) -> None:
        """Changed reward files and overrides.yaml take effect from this step (all ranks check the same files)."""
        before = self.reloader.version
        for message in self.reloader.check():
            if self.accelerator.is_main_process:
                logging.getLogger("rlft").warning("hot reload: %s", message)
        if self.reloader.version != before:  # TRL's logged `reward` and rlft's totals use the new weights
            self.reward_weights = torch.tensor([r.weight for r in self.reward_suite.rewards], dtype=torch.float32,
                                               device=self.reward_weights.device)

    # --- completions.jsonl ---------------------------------------------------------------------
    def _write_completions(self, out, rewards_NF, total_N, adv_N) -> None:
        """One row per completion of the gathered batch (up to monitor.log_completions), main process only."""
        if self._batch_log is None:
            return
        # sampled token counts (the report's lengths; decoded text re-tokenizes to other counts); every rank gathers
        tokens = self.accelerator.gather(out["completion_mask"].sum(dim=1)).tolist()
        rendered = self._rendered_prompts(out)  # every rank takes part in the gather
        if not self.accelerator.is_main_process:
            return
        ids, prompts, completions = self._batch_log
        if len(completions) != total_N.numel():
            return
        # the prompt exactly as the model saw it (chat template, special tokens), once per prompt id
        shown = [None] * len(completions)
        for i, pid in enumerate(ids[:self.completion_log.rows_to_write(len(completions))]):
            if pid not in self._rendered_seen and i < len(rendered):
                self._rendered_seen.add(pid)
                shown[i] = rendered[i]
        rewards = {name: rewards_NF[:, j].tolist() for j, name in enumerate(self.reward_func_names)}
        self.completion_log.write(self.state.global_step + 1, ids, prompts, completions, rewards, total_N.tolist(),
                                  advantages=adv_N.tolist(),
                                  extra={"completion_tokens": [int(t) for t in tokens]
                                         if len(tokens) == len(completions) else [None] * len(completions),
                                         "reward_version": [self.reward_version] * len(completions),
                                         "prompt_rendered": shown})

    def _rendered_prompts(self, out) -> list[str]:
        """The prompt of each completion decoded from the tokens the model got, over all processes."""
        ids_BT, mask_BT = out["prompt_ids"], out["prompt_mask"].bool()
        texts = [self.processing_class.decode(ids_BT[i][mask_BT[i]].tolist(), skip_special_tokens=False)
                 for i in range(ids_BT.size(0))]
        return gather_object(texts) if self.accelerator.num_processes > 1 else texts
