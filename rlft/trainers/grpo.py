"""TRL's GRPOTrainer with rlft's group-advantage and KL-penalty hooks.

TRL generates; rlft scores and logs through its rollout layer (rlft.trainers.grpo_rewards): `_calculate_rewards`
scores the completions with the shared scorer (`rlft.rollout.score_texts`, the safe reward suite) and gathers
the scores over processes. TRL then computes advantages inline in `_generate_and_score_completions`;
we let it run, then replace `advantages` with rlft's own, computed by the pure functions in
`rlft.algos` from the gathered rewards, and slice this process's share back out. TRL's loss accepts
per-token (B, T) advantages, which carries the KL penalty folded into the advantage. Completions go
to completions.jsonl through the shared `rlft.rollout.CompletionLog`.

TRL's private names used here are listed in rlft/trainers/trl_private.py (checked against the installed TRL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import add_fused_lm_head
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict, use_adapter

from rlft.algos import (
    constant_group_mask, default_horizon, expand_group_mask, group_advantages, kl_penalty_advantages,
    kl_sample_train, make_kl_controller,
)
from rlft.data.messages import as_text
from rlft.errors import RunError
from rlft.trainers.grpo_dynamic import GRPODynamicSampling, reward_totals
from rlft.trainers.grpo_importance import IS_METRICS, GRPOImportanceFromLoss
from rlft.trainers.grpo_rewards import NOT_REWARD_COLUMNS, GRPORewards

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig
    from rlft.rundir.folder import RunDir

__all__ = ["NOT_REWARD_COLUMNS", "RlftGRPOTrainer", "check_whole_groups"]


# metrics TRL's loss (and rlft's around it) average over the loss's tokens: undefined when there are none
TOKEN_METRICS = ("entropy", "kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                 "clip_ratio/low_min", "clip_ratio/high_max", "cispo_clip_ratio", "kl_sample_train_v1",
                 "kl_sample_train_v2", *IS_METRICS)

class RlftGRPOTrainer(GRPORewards, GRPODynamicSampling, GRPOImportanceFromLoss, GRPOTrainer):
    """TRL's trainer with rlft's hooks acting on `cfg.grpo` (and `cfg.monitor`); `run`: the run folder its logs go
    to (None: no completions.jsonl, reward_logs.jsonl or reward hot reload)."""

    def __init__(self, *args, cfg: RlftConfig, run: RunDir | None = None, reward_suite=None, ref_model_for_kl=None,
                 **kwargs):
        cpu_engine = _vllm_on_cpu(kwargs.get("args"))
        if cpu_engine:  # TRL 1.16 starts the engine for CUDA's vLLM; on its CPU build it needs other settings
            from rlft.trainers.vllm_colocate import cpu_engine_start

            with cpu_engine_start(kwargs.get("model"), cfg):
                super().__init__(*args, **kwargs)
        else:
            super().__init__(*args, **kwargs)
        if cpu_engine:
            from rlft.trainers.vllm_colocate import adopt_engine

            adopt_engine(self)
        self.cfg = cfg
        g = cfg.grpo
        self._init_rewards(run, reward_suite)
        n = self.accelerator.num_processes
        if g.dynamic_sampling and g.batch_size % n:  # each process refills and keeps its own whole groups
            raise RunError(f"grpo.dynamic_sampling with {n} processes needs grpo.batch_size ({g.batch_size}) "
                           f"divisible by {n}: each process samples, refills and keeps whole groups of its own; "
                           f"set grpo.batch_size to a multiple of {n} or turn grpo.dynamic_sampling off")
        self.eval_start: dict | None = None  # summary.json's eval.start, kept in checkpoints for --resume
        # the horizon counts optimizer steps; unset, a tenth of this run's (the controller acts within the run)
        horizon = g.kl_horizon or default_horizon(max(self.args.max_steps, 1))
        self.kl_ctl = make_kl_controller(g.kl_penalty_coef, g.target_kl, g.adaptive_kl, horizon)
        self._rlft_ref = None
        if ref_model_for_kl is not None:  # an explicit reference checkpoint (model.ref: PATH)
            self._rlft_ref = ref_model_for_kl.to(self.accelerator.device)
            # TRL scores its models through a fused LM head it adds at init; the reference needs the same
            add_fused_lm_head(self._rlft_ref, temperature=self.temperature,
                              cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32)
            if self.is_fsdp_enabled:  # sharded like the policy (TRL's own wrapping for its reference models)
                from trl.models import prepare_fsdp

                self._rlft_ref = prepare_fsdp(self._rlft_ref, self.accelerator)
            if g.kl_penalty_mode == "loss":
                self.ref_model = self._rlft_ref  # TRL's k3 loss reads self.ref_model
        self._rewards_per_func = None
        self._last_kl: float | None = None
        self._capture_train_logps = False
        self._train_logps = None
        self._current_inputs = None

    # --- state saved with each checkpoint ------------------------------------------------------
    def rlft_state_dict(self) -> dict:
        """The KL controller and the KL measured since its last update (the next update's input): without
        it a resumed run skips one update and its coefficient stays one step behind."""
        return {"kl_controller": self.kl_ctl.state_dict(), "last_kl": self._last_kl}

    def load_rlft_state_dict(self, state: dict) -> None:
        last_kl = state.get("last_kl", self._last_kl)
        if last_kl is not None and (not isinstance(last_kl, (int, float)) or isinstance(last_kl, bool)):
            raise ValueError(f"last_kl is {last_kl!r}, not a number")  # the next KL update would fail on it
        if "kl_controller" in state:
            self.kl_ctl.load_state_dict(state["kl_controller"])
        self._last_kl = last_kl
        if self.cfg.grpo.kl_penalty_mode == "loss" and self.cfg.grpo.kl_penalty_coef > 0:
            self.beta = self.kl_ctl.value

    def rlft_extra_state(self) -> dict:
        return {"eval_start": self.eval_start}

    def load_rlft_extra_state(self, state: dict) -> None:
        self.eval_start = state.get("eval_start", self.eval_start)

    # --- reference log-probs -----------------------------------------------------------------
    @torch.no_grad()
    def _logps(self, model, out: dict, use_ref: bool) -> torch.Tensor:
        """Per-token log-probs of `out`'s completions, without gradient: `model`'s, or with use_ref the reference's
        as TRL takes it (model.ref or TRL's reference copy; else the LoRA policy with its adapter off, or with the
        "ref" adapter TRL adds when it re-trains one)."""
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        keep = out["completion_ids"].size(1)
        bs = self.args.per_device_train_batch_size
        ref = self._rlft_ref if self._rlft_ref is not None else self.ref_model
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            if not use_ref or ref is not None:
                return self._get_per_token_logps_and_entropies(ref if use_ref else model, ids, mask, keep,
                                                               batch_size=bs)[0]
            unwrapped = self.accelerator.unwrap_model(self.model)
            with use_adapter(unwrapped, adapter_name="ref" if "ref" in getattr(unwrapped, "peft_config", {}) else None):
                return self._get_per_token_logps_and_entropies(self.model, ids, mask, keep, batch_size=bs)[0]

    # --- the hook ----------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        starts = mode == "train" and self._starts_iteration()
        g = self.cfg.grpo
        if starts and g.kl_penalty_coef > 0 and self._last_kl is not None:
            # once per generation, which trains steps_per_generation x num_iterations optimizer steps
            self.kl_ctl.update(self._last_kl, self.args.steps_per_generation * self.num_iterations)
            if g.kl_penalty_mode == "loss":
                self.beta = self.kl_ctl.value
        if starts and self.reloader is not None:
            self._reload_rewards()
        if mode == "train":  # TRL's sampler hands each process whole groups where the layout allows it
            check_whole_groups([ex.get("prompt_id", as_text(ex.get("prompt"))) for ex in inputs], g.group_size,
                               self.accelerator.process_index)
        if mode == "train" and g.dynamic_sampling:  # DAPO: refill until the groups carry signal (grpo_dynamic.py)
            out = self._dynamic_generate_and_score(inputs)
        else:
            out = self._trl_generate_and_score(inputs)
        if mode != "train":
            return out
        m = self._metrics[mode]
        m["reward_version"].append(float(self.reward_version))
        device = out["completion_ids"].device
        n_local = out["completion_ids"].size(0)
        rewards_NF = self._rewards_per_func.to(device)  # N: the gathered batch, F: reward functions
        weights_F = self.reward_weights.to(device)
        # a completion any weighted reward failed on has no total: excluded from its group's baseline
        total_N, valid_N = reward_totals(rewards_NF, weights_F)
        adv_N = group_advantages(total_N, g.group_size, g.baseline_mode, valid=valid_N)
        const_P = constant_group_mask(total_N, g.group_size, valid=valid_N)
        m["frac_constant_groups"].append(const_P.float().mean().item())
        m["frac_unscored"].append((~valid_N).float().mean().item())
        clipped = m.get("completions/clipped_ratio")
        if clipped:  # TRL's share of this batch's completions (gathered) cut at max_tokens without an EOS
            m["frac_truncated"].append(clipped[-1])
            if g.mask_truncated:  # TRL's mask_truncated_completions leaves exactly those out of the loss
                m["frac_masked_truncated"].append(clipped[-1])
        self._count_reward_failures(m, valid_N, device)

        start = self.accelerator.process_index * n_local
        local = slice(start, start + n_local)
        adv_B = adv_N[local]  # B: this process's rows
        completion_mask = out["completion_mask"]
        if g.remove_constant_reward_groups:
            keep_B = ~expand_group_mask(const_P, g.group_size)[local]
            completion_mask = completion_mask * keep_B.unsqueeze(1).to(completion_mask.dtype)
            out["completion_mask"] = completion_mask
            out["num_items_in_batch"] = self.accelerator.gather(completion_mask.sum()).sum()
            m["groups_removed"].append(const_P.float().sum().item())

        out["advantages"] = self._kl_advantages(out, adv_B, completion_mask, m, device)
        m["kl_coef"].append(self.kl_ctl.value if g.kl_penalty_coef > 0 else 0.0)
        self._write_completions(out, rewards_NF, total_N, adv_N)
        if self.reward_suite is not None:
            rows = self.reward_suite.pop_logs()  # every rank pops; the main process writes its own calls
            if self.accelerator.is_main_process:
                self.reward_log.write(self.state.global_step + 1, rows)
        return out

    def _count_reward_failures(self, m, valid_N, device) -> None:
        """The reward suite's error and judge counts for this step (summed over processes) and its failure guard."""
        g = self.cfg.grpo
        if self.reward_suite is not None:
            local = self.reward_suite.metrics()  # this step's window: error counts (and it drains the window)
            for name in self.reward_suite.names:
                errs = torch.tensor(local[f"rewards/{name}/errors"], device=device)
                m[f"rewards/{name}/errors"].append(self.accelerator.gather(errs).sum().item())
            for key in sorted(k for k in local if k.rsplit("/", 1)[-1].startswith("judge_")):  # counts: summed
                m[key].append(self.accelerator.gather(torch.tensor(local[key], device=device)).sum().item())
            # every completion scored counts, those of the groups dynamic sampling dropped included
            scored, failed = self._dynamic_scored if g.dynamic_sampling else (valid_N.numel(), (~valid_N).sum().item())
            self.reward_suite.record(scored, failed)  # may stop the run

    def _kl_advantages(self, out, adv_B, completion_mask, m, device):
        """This batch's advantages: the group advantages, with the KL penalty in them per token where
        kl_penalty_mode is `advantage` (or handed to the loss's forward pass when the sampler is the policy); the
        measured KL is kept for the controller."""
        g = self.cfg.grpo
        if g.kl_penalty_coef <= 0:
            return adv_B
        if g.kl_penalty_mode != "advantage":
            return adv_B  # TRL measures the KL in the loss and logs `kl`
        logp_sample = out.get("old_per_token_logps")
        logp_ref = self._logps(self.model, out, use_ref=True)
        if logp_sample is None:
            # The sampler is the current policy, so the loss's own forward pass yields the sampler
            # log-probs: the penalty is applied there (per micro-batch, as tinker's streaming mode
            # does) instead of paying for one more forward pass here.
            out["rlft_ref_logps"] = logp_ref
            out["rlft_base_advantages"] = adv_B
            return adv_B
        adv_BT, kl_m = kl_penalty_advantages(adv_B, logp_sample, logp_ref, completion_mask.float(),
                                             self.kl_ctl.value, g.kl_discount_factor)
        kl = self.accelerator.gather(torch.tensor(kl_m["kl_policy_ref"], device=device)).mean().item()
        self._last_kl = kl
        m["kl_policy_ref"].append(kl)
        return adv_BT

    def _starts_iteration(self) -> bool:
        """This call samples the first (here: the only) part of a training iteration's batch: the KL
        controller and reward reloads act once per iteration."""
        return True

    def _trl_generate_and_score(self, inputs) -> dict:
        """TRL's own sampling, scoring and batching (a subclass may hand it completions sampled elsewhere); with
        vLLM, its importance-sampling ratio comes from the loss's pass where it can (grpo_importance.py)."""
        with self._ratio_pass_skipped():
            return super()._generate_and_score_completions(inputs)

    # --- sampler vs learner KL (tinker's kl_sample_train_v1/v2) ------------------------------
    def _compute_loss(self, model, inputs):
        self._current_inputs = inputs
        self._capture_train_logps = True
        m = self._metrics["train" if model.training else "eval"]
        before = {k: len(m[k]) for k in TOKEN_METRICS if k in m}
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._capture_train_logps = False
        tokens = self.accelerator.gather(inputs["completion_mask"].sum().reshape(1)).sum().item()
        if tokens == 0:  # every row masked (mask_truncated, constant groups removed): a mean over no tokens is
            # not a measurement (TRL writes 0, and an entropy of 0 reads as a collapse): left out of the row
            self._drop_last(m, before)
        if self._train_logps is not None and model.training:
            # the sampler's own log-probs where another engine sampled (vLLM), else the learner's at sampling time
            old = inputs.get("sampling_per_token_logps", inputs.get("old_per_token_logps"))
            if old is not None:
                mask = inputs["completion_mask"].float() * ~old.isnan()  # a token vLLM could not score: NaN
                kst = kl_sample_train(old.nan_to_num(), self._train_logps, mask)
                for k, v in kst.items():
                    self._metrics["train"][k].append(v)
            else:  # TRL used per_token_logps.detach() as the sampler: identical by construction
                self._metrics["train"]["kl_sample_train_v1"].append(0.0)
                self._metrics["train"]["kl_sample_train_v2"].append(0.0)
        self._train_logps = None
        if tokens == 0:
            self._drop_last(m, before)  # the sampler-learner KLs just added, over the same no tokens
        kl_hist = self._metrics["train"].get("kl")
        if self.cfg.grpo.kl_penalty_mode == "loss" and self.beta != 0 and kl_hist:
            self._last_kl = kl_hist[-1]  # TRL's k3 estimate, the input of the adaptive controller
        return loss

    @staticmethod
    def _drop_last(m, before: dict) -> None:
        """Remove the values the last loss call appended to the token metrics (a key left empty goes: TRL's log
        divides by the count)."""
        for key in TOKEN_METRICS:
            if key in m and len(m[key]) > before.get(key, 0):
                del m[key][before.get(key, 0):]
                if not m[key]:
                    del m[key]

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._capture_train_logps:
            self._train_logps = result[0].detach()
            self._capture_train_logps = False
            inputs = self._current_inputs
            if inputs is not None:
                self._ratio_from_loss_pass(inputs, self._train_logps)
            if inputs is not None and "rlft_ref_logps" in inputs:
                self._fold_kl_into_advantages(inputs, self._train_logps)
        return result

    def _fold_kl_into_advantages(self, inputs: dict, logp_sample: torch.Tensor) -> None:
        """KL-in-advantage from the loss's forward pass (runs before TRL's loss reads `advantages`);
        recomputed from the base advantages so re-used batches never accumulate the penalty."""
        adv_BT, kl_m = kl_penalty_advantages(inputs["rlft_base_advantages"], logp_sample, inputs["rlft_ref_logps"],
                                             inputs["completion_mask"].float(), self.kl_ctl.value,
                                             self.cfg.grpo.kl_discount_factor)
        inputs["advantages"] = adv_BT
        device = logp_sample.device
        kl = self.accelerator.gather(torch.tensor(kl_m["kl_policy_ref"], device=device)).mean().item()
        self._metrics["train"]["kl_policy_ref"].append(kl)
        self._last_kl = kl

    # --- keep groups whole within a substep -------------------------------------------------
    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            batch = _shuffle_groups(batch, self.cfg.grpo.group_size)
            self._buffered_inputs = split_tensor_dict(batch, self.args.steps_per_generation)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]


def _vllm_on_cpu(args) -> bool:
    """TRL samples with a colocated vLLM engine, and the installed vLLM is its CPU build
    (rlft/trainers/vllm_colocate.py patches TRL for it)."""
    if args is None or not args.use_vllm or args.vllm_mode != "colocate":
        return False
    from rlft.trainers.vllm_colocate import vllm_on_cpu

    return vllm_on_cpu()


def check_whole_groups(prompt_keys: list, group_size: int, rank: int = 0) -> None:
    """A process's generation batch (one key per row: its prompt id) must hold whole groups: each run of
    `group_size` rows one prompt's completions. TRL's RepeatSampler puts a prompt's `group_size` rows next to
    each other and each process takes a contiguous share of the batch, so the shares are whole groups whenever
    their size is a multiple of the group size, i.e. grpo.batch_size is divisible by the processes (otherwise a
    group spans two processes by construction; advantages are still computed over the gathered batch). Raises
    RuntimeError when a share of whole-group size holds a split group (the group shuffle and the per-process
    slices of the group advantages rely on it)."""
    n = len(prompt_keys)
    if n % group_size:
        return  # the layout splits groups over processes: nothing to hold whole here
    for start in range(0, n, group_size):
        block = prompt_keys[start:start + group_size]
        if any(k != block[0] for k in block):
            raise RuntimeError(f"GRPO: process {rank} got a generation batch whose rows {start}.."
                               f"{start + group_size - 1} are not one prompt's group of {group_size} (prompt ids "
                               f"{block}): groups were split across processes or reordered, so group advantages "
                               "would mix prompts")


def _shuffle_groups(batch: dict, group_size: int) -> dict:
    """Shuffle the order of whole groups (TRL shuffles single completions, splitting groups across substeps)."""
    n = next(v for v in batch.values() if isinstance(v, torch.Tensor) and v.dim() > 0).size(0)
    if n % group_size:
        return shuffle_sequence_dict(batch)
    order = torch.randperm(n // group_size)
    perm = (order.unsqueeze(1) * group_size + torch.arange(group_size)).flatten()
    out = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor) and v.dim() > 0 and v.size(0) == n:
            v = v[perm]
        elif isinstance(v, list) and len(v) == n:
            v = [v[i] for i in perm.tolist()]
        out[k] = v
    return out
