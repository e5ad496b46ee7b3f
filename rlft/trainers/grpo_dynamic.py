"""DAPO's dynamic sampling on single-turn GRPO (TRL's trainer): sample more groups until a step holds its
grpo.batch_size groups whose rewards differ (a constant group has no advantage whatever the baseline).

One step's generation runs TRL's own generate-and-score (`_trl_generate_and_score`) once on the prompts TRL's
sampler handed over, then again on refill prompts drawn from the train dataset (a permutation seeded by
train.seed, the step and the try: a resumed run refills alike) while any process is short of groups with
signal, at most grpo.dynamic_sampling_max_tries samplings. The signal is read from the gathered rewards, so
every process takes the same decision with no extra communication; each process keeps its own first
`want` groups with signal in sampling order (`rlft.algos.pick_groups`, as the episode loop does), constant
groups filling what is still missing. The kept rows of every try are then one TRL batch again: prompts
left-padded, completions right-padded to the widest try, the gathered rewards and completions.jsonl rows in
the same process-major order TRL's gather gives, and TRL's sampling metrics recomputed on the kept batch.
rlft's hook (rlft.trainers.grpo) then computes advantages, KL and logs on that batch as on any other.

The passes that only describe rows run once, on the kept rows, after the last try, not inside every try on rows
a step with few signal groups mostly drops (measured on SmolLM2 with 4 tries: 11.3 s of a 40.9 s step): the
reference model's log-probs when beta != 0, and TRL's vLLM importance-sampling ratio (from the loss's own pass,
rlft.trainers.grpo_importance, or from the log-probs TRL keeps per try when an optimizer step falls between
sampling and training). The weights do not change between tries, so the numbers are the same.

Pure tensor helpers first (tests/test_grpo_dynamic.py works them on hand-made tensors), then the mixin.
"""

from __future__ import annotations

import contextlib
import logging
import statistics

import torch
from trl.trainer.utils import nanstd

from rlft.algos import constant_group_mask, pick_groups

# TRL's output keys and how they are padded when tries of different widths are stacked ("pad": the pad token)
LEFT_PADDED = {"prompt_ids": "pad", "prompt_mask": 0}
RIGHT_PADDED = {"completion_ids": "pad", "completion_mask": 0, "tool_mask": 1, "old_per_token_logps": 0.0,
                "sampling_per_token_logps": 0.0, "ref_per_token_logps": 0.0, "importance_sampling_ratio": 1.0,
                "advantages": 0.0}
RECOMPUTED = ("num_items_in_batch",)  # gathered over processes: computed again on the kept rows

__all__ = ["GRPODynamicSampling", "concat_outputs", "keep_rows", "process_major", "reward_totals",
           "sampling_metrics", "take_rows"]


def reward_totals(rewards_NF: torch.Tensor, weights_F: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(total_N, valid_N): each completion's weighted reward total, NaN where a weighted reward failed (valid_N
    False: left out of its group's baseline), as rlft's GRPO hook computes them."""
    valid_N = ~torch.isnan(rewards_NF[:, weights_F != 0]).any(dim=1)
    total_N = torch.where(valid_N, (torch.nan_to_num(rewards_NF) * weights_F).sum(dim=1), float("nan"))
    return total_N, valid_N


def _pad_to(t: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    if t.dim() < 2 or t.size(1) >= width:
        return t
    fill = torch.full((t.size(0), width - t.size(1), *t.shape[2:]), value, dtype=t.dtype, device=t.device)
    return torch.cat([fill, t] if left else [t, fill], dim=1)


def concat_outputs(outs: list[dict], pad_token_id: int) -> dict:
    """TRL batches of one process (one per try) as one: rows stacked in order, prompt tensors left-padded and
    completion tensors right-padded to the widest. `num_items_in_batch` is left out (a gathered count: the
    caller computes it on the rows it keeps). Raises NotImplementedError on keys it cannot stack (multimodal
    inputs), ValueError when the tries' keys differ."""
    for out in outs:
        for k in out:
            if k not in RECOMPUTED and k not in LEFT_PADDED and k not in RIGHT_PADDED:
                raise NotImplementedError(f"grpo.dynamic_sampling cannot stack TRL's `{k}` (multimodal or tool "
                                          "batches); turn grpo.dynamic_sampling off for this run")
    keys = [k for k in outs[0] if k not in RECOMPUTED]
    for out in outs[1:]:
        if [k for k in out if k not in RECOMPUTED] != keys:
            raise ValueError(f"grpo.dynamic_sampling: TRL's batches differ in keys ({keys} vs {list(out)})")
    joined = {}
    for k in keys:
        left = k in LEFT_PADDED
        value = (LEFT_PADDED if left else RIGHT_PADDED)[k]
        value = pad_token_id if value == "pad" else value
        width = max(o[k].size(1) if o[k].dim() > 1 else 0 for o in outs)
        joined[k] = torch.cat([_pad_to(o[k], width, value, left) for o in outs], dim=0)
    return joined


def take_rows(batch: dict, rows: list[int]) -> dict:
    """The batch's rows `rows` (in that order), every tensor with a row per completion."""
    index = torch.tensor(rows, dtype=torch.long)
    return {k: v[index.to(v.device)] if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in batch.items()}


def process_major(parts: list, num_processes: int) -> list | torch.Tensor:
    """Gathered tries (each a tensor or list of num_processes x n rows, process p's rows p*n .. p*n+n-1) as one
    gathered batch of process-major order: process 0's rows of every try in try order, then process 1's...,
    which is the order TRL's gather of the per-process stacked batches (`concat_outputs`) would give."""
    n = len(parts[0]) // num_processes
    order = [(t, p * n + i) for p in range(num_processes) for t in range(len(parts)) for i in range(n)]
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(parts, dim=0)[torch.tensor([t * n * num_processes + j for t, j in order],
                                                    device=parts[0].device)]
    return [parts[t][j] for t, j in order]


def keep_rows(signal_TPK: list[list[list[bool]]], want: int, group_size: int) -> tuple[list[list[int]], list[int]]:
    """Which rows each process keeps: signal_TPK[t][p][k] says whether try t's group k on process p carries
    signal. Returns (per process: its kept row indices into its tries' stacked rows, in sampling order; per
    process: how many kept groups carry signal). Each process keeps its first `want` groups with signal,
    constant ones filling the rest (`rlft.algos.pick_groups`)."""
    rows, kept = [], []
    for p in range(len(signal_TPK[0])):
        signal = [s for try_ in signal_TPK for s in try_[p]]
        groups, n_signal = pick_groups(signal, want)
        rows.append([k * group_size + j for k in groups for j in range(group_size)])
        kept.append(n_signal)
    return rows, kept


def sampling_metrics(lengths_N: torch.Tensor, truncated_N: torch.Tensor, rewards_NF: torch.Tensor,
                     weights_F: torch.Tensor, names: list[str], group_size: int, scale_rewards: str) -> dict:
    """TRL's per-generation metrics (its names, its formulas) on a gathered batch: completion lengths, the share
    cut at max_tokens, the reward per function and its weighted sum."""
    lengths = lengths_N.float()
    terminated = lengths[~truncated_N.bool()]
    if terminated.numel() == 0:
        terminated = torch.zeros(1)
    m = {"completions/mean_length": lengths.mean().item(), "completions/min_length": lengths.min().item(),
         "completions/max_length": lengths.max().item(),
         "completions/clipped_ratio": truncated_N.float().mean().item(),
         "completions/mean_terminated_length": terminated.mean().item(),
         "completions/min_terminated_length": terminated.min().item(),
         "completions/max_terminated_length": terminated.max().item()}
    for j, name in enumerate(names):
        m[f"rewards/{name}/mean"] = torch.nanmean(rewards_NF[:, j]).item()
        m[f"rewards/{name}/std"] = nanstd(rewards_NF[:, j]).item()
    rewards = (rewards_NF * weights_F.to(rewards_NF.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_NF).all(dim=1)] = float("nan")
    m["reward"], m["reward_std"] = torch.nanmean(rewards).item(), nanstd(rewards).item()
    if scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    else:
        std = nanstd(rewards.view(-1, group_size), dim=1).repeat_interleave(group_size)
    m["frac_reward_zero_std"] = torch.isclose(std, torch.zeros_like(std)).float().mean().item()
    return m


class GRPODynamicSampling:
    """Mixed into rlft's GRPOTrainer (rlft.trainers.grpo): `_dynamic_generate_and_score` replaces one call of
    `_trl_generate_and_score` on a training step when grpo.dynamic_sampling is on."""

    _dynamic_said = False  # the out-of-tries warning, once a run

    def _refill_inputs(self, attempt: int, n_local: int) -> list[dict]:
        """This process's inputs for sampling `attempt` (1, 2, ...) of this step beyond its first: as many
        groups as TRL handed it, prompts from a permutation of the train dataset seeded by (train.seed, step,
        attempt) that every process draws alike and slices by its rank (no prompt on two processes)."""
        G, ds = self.cfg.grpo.group_size, self.train_dataset
        groups, rank = n_local // G, self.accelerator.process_index
        seed = self.args.seed + 1_000_003 * (self.state.global_step + 1) + 7_919 * attempt
        perm = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed))
        picks = [int(perm[(rank * groups + k) % len(ds)]) for k in range(groups)]
        return [dict(ds[i]) for i in picks for _ in range(G)]

    def _dynamic_generate_and_score(self, inputs) -> dict:
        """TRL's generate-and-score until every process holds its share of grpo.batch_size groups with signal
        (at most grpo.dynamic_sampling_max_tries tries), as one TRL batch of the kept rows; sets the gathered
        rewards and completions.jsonl rows rlft's hook reads, and the dynamic/* metrics."""
        g = self.cfg.grpo
        G, P, rank = g.group_size, self.accelerator.num_processes, self.accelerator.process_index
        n = len(inputs)
        if n % G:
            raise RuntimeError(f"grpo.dynamic_sampling: process {rank} got {n} completions to sample, not whole "
                               f"groups of {G} (grpo.batch_size must be divisible by the {P} processes)")
        want = n // G
        m = self._metrics["train"]
        before = {k: len(v) for k, v in m.items()}
        outs, rewards, logs, lengths, truncated, signal = [], [], [], [], [], []
        scored = failed = 0
        tries = 0
        while True:
            tries += 1
            with self._row_passes_deferred():
                outs.append(self._trl_generate_and_score(inputs))
            rewards.append(self._rewards_per_func)
            logs.append(self._batch_log)
            lengths.append(self._completion_lengths)
            truncated.append(self._completion_truncated)
            total, valid = reward_totals(self._rewards_per_func, self.reward_weights.to(self._rewards_per_func.device))
            scored, failed = scored + valid.numel(), failed + int((~valid).sum())
            const = constant_group_mask(total, G, valid=valid).view(P, want)
            signal.append((~const).tolist())
            short = any(sum(sum(s[p]) for s in signal) < want for p in range(P))  # the same on every process
            if not short or tries >= g.dynamic_sampling_max_tries:
                break
            inputs = self._refill_inputs(tries, n)
        rows, kept = keep_rows(signal, want, G)
        out = take_rows(concat_outputs(outs, self._tokenizer.pad_token_id), rows[rank])
        loss_mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        out["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        everyone = [p * tries * n + r for p in range(P) for r in rows[p]]  # into process_major's order
        rewards_NF = process_major(rewards, P)[torch.tensor(everyone, device=rewards[0].device)]
        self._rewards_per_func = rewards_NF
        self._dynamic_scored = (scored, failed)  # the reward failure guard counts every try's completions
        if logs[0] is not None:
            self._batch_log = tuple([process_major([log[j] for log in logs], P)[i] for i in everyone]
                                    for j in range(3))
        lengths_B = torch.tensor([x for part in lengths for x in part], device=out["completion_ids"].device)
        truncated_B = torch.tensor([x for part in truncated for x in part], device=out["completion_ids"].device)
        index = torch.tensor(rows[rank], device=lengths_B.device)
        lengths_N = self.accelerator.gather(lengths_B[index])
        truncated_N = self.accelerator.gather(truncated_B[index])
        redo = sampling_metrics(lengths_N.cpu(), truncated_N.cpu(), rewards_NF.cpu(), self.reward_weights.cpu(),
                                list(self.reward_func_names), G, self.scale_rewards)
        # TRL logged each try; its per-generation metrics now describe the batch trained on (other keys it
        # appended per try, e.g. vLLM's sampling/*, are averaged over the tries)
        for k, v in list(m.items()):
            grown = v[before.get(k, 0):]
            if not grown:
                continue
            del v[before.get(k, 0):]
            v.append(redo[k] if k in redo else statistics.fmean(grown))
        self._kept_row_passes(out, loss_mask)
        kept_all = sum(kept)
        if kept_all < want * P and not self._dynamic_said and self.accelerator.is_main_process:
            self._dynamic_said = True  # once a run: metrics.jsonl's dynamic/kept_groups has every step
            logging.getLogger("rlft").warning(
                "dynamic sampling: step %d has %d of its %d groups with signal after %d samplings "
                "(grpo.dynamic_sampling_max_tries); it trains on them, constant groups (no advantage) filling the "
                "rest; later shortfalls show in dynamic/kept_groups", self.state.global_step + 1, kept_all,
                want * P, tries)
        m["dynamic/tries"].append(float(tries))
        m["dynamic/kept_groups"].append(float(kept_all))
        return out

    @contextlib.contextmanager
    def _row_passes_deferred(self):
        """While a try samples: TRL's importance-sampling pass and reference pass off (beta 0), back on after."""
        saved = self.vllm_importance_sampling_correction, self.beta
        self.vllm_importance_sampling_correction, self.beta = False, 0.0
        try:
            yield
        finally:
            self.vllm_importance_sampling_correction, self.beta = saved

    def _kept_row_passes(self, out: dict, loss_mask: torch.Tensor) -> None:
        """What `_row_passes_deferred` held back, once, on the kept rows: the reference's log-probs where
        beta != 0 (as TRL takes them), and TRL's importance-sampling ratio where vLLM sampled, from the log-probs
        TRL kept in every try where an optimizer step falls between sampling and training (else the loss's own
        pass gives it: rlft.trainers.grpo_importance)."""
        if self.beta != 0.0:
            out["ref_per_token_logps"] = self._logps(self.model, out, use_ref=True)
        if self.use_vllm and self.vllm_importance_sampling_correction and not self._ratio_from_loss():
            self._importance_correction(out, out["old_per_token_logps"], loss_mask)
