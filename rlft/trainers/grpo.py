"""TRL's GRPOTrainer with rlft's group-advantage and KL-penalty hooks.

TRL computes advantages inline in `_generate_and_score_completions`. We let it run, then replace
`advantages` with rlft's own, computed by the pure functions in `rlft.algos` from the rewards of
all processes (captured from `_calculate_rewards`, which returns them gathered), and slice this
process's share back out. TRL's loss accepts per-token (B, T) advantages, which carries the KL
penalty folded into the advantage.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict, use_adapter

from rlft.algos import (
    constant_group_mask, expand_group_mask, group_advantages, kl_penalty_advantages, kl_sample_train,
    make_kl_controller,
)
from rlft.data.prompts import PROMPT_ID


@dataclass
class GRPOHooks:
    """The `grpo.*` knobs the hooks act on (mapped once from the config)."""
    group_size: int
    baseline_mode: str = "group_mean"
    remove_constant_reward_groups: bool = False
    kl_penalty_mode: str = "advantage"       # "advantage" | "loss"
    kl_penalty_coef: float = 0.0
    kl_discount_factor: float = 0.0
    adaptive_kl: bool = False
    target_kl: float = 0.1
    kl_horizon: int = 10000
    completions_path: str | None = None      # completions.jsonl, written by the main process
    log_completions: int = 4                  # per step; -1 = all


def _text(x: Any) -> str:
    """A prompt or completion as plain text (chat messages → their contents)."""
    if isinstance(x, str):
        return x
    if isinstance(x, list):
        return "\n".join(m.get("content", "") if isinstance(m, dict) else str(m) for m in x)
    return str(x)


class RlftGRPOTrainer(GRPOTrainer):
    def __init__(self, *args, hooks: GRPOHooks, reward_suite=None, ref_model_for_kl=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.hooks = hooks
        self.reward_suite = reward_suite
        self.kl_ctl = make_kl_controller(hooks.kl_penalty_coef, hooks.target_kl, hooks.adaptive_kl, hooks.kl_horizon)
        self._rlft_ref = None
        if ref_model_for_kl is not None:  # an explicit reference checkpoint (model.ref: PATH)
            self._rlft_ref = ref_model_for_kl.to(self.accelerator.device)
            if hooks.kl_penalty_mode == "loss":
                self.ref_model = self._rlft_ref  # TRL's k3 loss reads self.ref_model
        self._rewards_per_func = None
        self._last_kl: float | None = None
        self._capture_train_logps = False
        self._train_logps = None
        self._current_inputs = None
        self._prompt_ids_local: list = []
        self._rendered_seen: set = set()

    # --- rewards ---------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rewards_per_func = rewards  # gathered over processes: (N_all, F), NaN = no score
        return rewards

    # --- reference log-probs -----------------------------------------------------------------
    @torch.no_grad()
    def _logps(self, model, out: dict, use_ref: bool) -> torch.Tensor:
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        keep = out["completion_ids"].size(1)
        bs = self.args.per_device_train_batch_size
        if not use_ref:
            return self._get_per_token_logps_and_entropies(model, ids, mask, keep, batch_size=bs)[0]
        if self._rlft_ref is not None:
            return self._get_per_token_logps_and_entropies(self._rlft_ref, ids, mask, keep, batch_size=bs)[0]
        unwrapped = self.accelerator.unwrap_model(self.model)
        with use_adapter(unwrapped, adapter_name=None):  # LoRA: the base model is the adapter-disabled policy
            return self._get_per_token_logps_and_entropies(self.model, ids, mask, keep, batch_size=bs)[0]

    # --- the hook ----------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        if mode == "train" and self.hooks.kl_penalty_coef > 0 and self._last_kl is not None:
            n = self.args.generation_batch_size
            self.kl_ctl.update(self._last_kl, n)
            if self.hooks.kl_penalty_mode == "loss":
                self.beta = self.kl_ctl.value
        out = super()._generate_and_score_completions(inputs)
        if mode != "train":
            return out
        self._prompt_ids_local = [x.get(PROMPT_ID) for x in inputs]
        h, m = self.hooks, self._metrics[mode]
        device = out["completion_ids"].device
        n_local = out["completion_ids"].size(0)
        rpf = self._rewards_per_func.to(device)
        weights = self.reward_weights.to(device)
        # a completion any weighted reward failed on has no total: excluded from its group's baseline
        valid = ~torch.isnan(rpf[:, weights != 0]).any(dim=1)
        total = torch.where(valid, (torch.nan_to_num(rpf) * weights).sum(dim=1), float("nan"))
        adv = group_advantages(total, h.group_size, h.baseline_mode, valid=valid)
        const_P = constant_group_mask(total, h.group_size, valid=valid)
        m["frac_constant_groups"].append(const_P.float().mean().item())
        m["frac_unscored"].append((~valid).float().mean().item())
        if self.reward_suite is not None:
            for r in self.reward_suite.rewards:
                errs = torch.tensor(float(r.pop_counts()["errors"]), device=device)
                m[f"rewards/{r.name}/errors"].append(self.accelerator.gather(errs).sum().item())
            self.reward_suite.record(valid.numel(), (~valid).sum().item())  # may stop the run

        start = self.accelerator.process_index * n_local
        local = slice(start, start + n_local)
        adv_local = adv[local]
        completion_mask = out["completion_mask"]
        if h.remove_constant_reward_groups:
            keep_local = ~expand_group_mask(const_P, h.group_size)[local]
            out["completion_mask"] = completion_mask = completion_mask * keep_local.unsqueeze(1).to(completion_mask.dtype)
            out["num_items_in_batch"] = self.accelerator.gather(completion_mask.sum()).sum()
            m["groups_removed"].append(const_P.float().sum().item())

        if h.kl_penalty_coef > 0:
            if h.kl_penalty_mode == "advantage":
                logp_sample = out.get("old_per_token_logps")
                logp_ref = self._logps(self.model, out, use_ref=True)
                if logp_sample is None:
                    # The sampler is the current policy, so the loss's own forward pass yields the sampler
                    # log-probs: the penalty is applied there (per micro-batch, as tinker's streaming mode
                    # does) instead of paying for one more forward pass here.
                    out["rlft_ref_logps"] = logp_ref
                    out["rlft_base_advantages"] = adv_local
                    out["advantages"] = adv_local
                    kl = None
                else:
                    adv_BT, kl_m = kl_penalty_advantages(adv_local, logp_sample, logp_ref, completion_mask.float(),
                                                         self.kl_ctl.value, h.kl_discount_factor)
                    kl = self.accelerator.gather(torch.tensor(kl_m["kl_policy_ref"], device=device)).mean().item()
                    out["advantages"] = adv_BT
            else:
                out["advantages"] = adv_local
                kl = None  # TRL measures it in the loss and logs `kl`
            self._last_kl = kl if kl is not None else self._last_kl
            if kl is not None:
                m["kl_policy_ref"].append(kl)
        else:
            out["advantages"] = adv_local
        m["kl_coef"].append(self.kl_ctl.value if h.kl_penalty_coef > 0 else 0.0)
        self._write_completions(out, rpf, total, adv)
        return out

    def _rendered_prompts(self, out) -> tuple[list, list[str]]:
        """(prompt id, the prompt exactly as the model saw it) per completion, over all processes."""
        from accelerate.utils import gather_object

        ids_BT, mask_BT = out["prompt_ids"], out["prompt_mask"].bool()
        texts = [self.processing_class.decode(ids_BT[i][mask_BT[i]].tolist(), skip_special_tokens=False)
                 for i in range(ids_BT.size(0))]
        ids = list(getattr(self, "_prompt_ids_local", [None] * len(texts)))
        if self.accelerator.num_processes > 1:
            ids, texts = gather_object(ids), gather_object(texts)
        return ids, texts

    # --- sampler vs learner KL (tinker's kl_sample_train_v1/v2) ------------------------------
    def _compute_loss(self, model, inputs):
        self._current_inputs = inputs
        self._capture_train_logps = True
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._capture_train_logps = False
        if self._train_logps is not None and model.training:
            old = inputs.get("old_per_token_logps")
            if old is not None:
                kst = kl_sample_train(old, self._train_logps, inputs["completion_mask"].float())
                for k, v in kst.items():
                    self._metrics["train"][k].append(v)
            else:  # TRL used per_token_logps.detach() as the sampler: identical by construction
                self._metrics["train"]["kl_sample_train_v1"].append(0.0)
                self._metrics["train"]["kl_sample_train_v2"].append(0.0)
        self._train_logps = None
        kl_hist = self._metrics["train"].get("kl")
        if self.hooks.kl_penalty_mode == "loss" and self.beta != 0 and kl_hist:
            self._last_kl = kl_hist[-1]  # TRL's k3 estimate, the input of the adaptive controller
        return loss

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._capture_train_logps:
            self._train_logps = result[0].detach()
            self._capture_train_logps = False
            inputs = self._current_inputs
            if inputs is not None and "rlft_ref_logps" in inputs:
                self._fold_kl_into_advantages(inputs, self._train_logps)
        return result

    def _fold_kl_into_advantages(self, inputs: dict, logp_sample: torch.Tensor) -> None:
        """KL-in-advantage from the loss's forward pass (runs before TRL's loss reads `advantages`);
        recomputed from the base advantages so re-used batches never accumulate the penalty."""
        adv_BT, kl_m = kl_penalty_advantages(inputs["rlft_base_advantages"], logp_sample, inputs["rlft_ref_logps"],
                                             inputs["completion_mask"].float(), self.kl_ctl.value,
                                             self.hooks.kl_discount_factor)
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
            batch = _shuffle_groups(batch, self.hooks.group_size)
            self._buffered_inputs = split_tensor_dict(batch, self.args.steps_per_generation)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # --- completions.jsonl ---------------------------------------------------------------------
    def _write_completions(self, out, rpf, total, adv) -> None:
        h = self.hooks
        if not h.completions_path or h.log_completions == 0:
            return
        n_all = total.numel()
        prompts = [_text(p) for p in list(self._logs["prompt"])[-n_all:]]  # TRL keeps the gathered batch
        completions = [_text(c) for c in list(self._logs["completion"])[-n_all:]]
        prompt_ids, rendered = self._rendered_prompts(out)  # every process takes part in the gather
        if not self.accelerator.is_main_process or len(completions) != n_all:
            return
        # log_completions counts groups (prompts): each brings its group_size completions
        n = len(completions) if h.log_completions < 0 else min(h.log_completions * h.group_size, len(completions))
        step = self.state.global_step + 1
        with open(h.completions_path, "a") as f:
            for i in range(n):
                pid = prompt_ids[i] if i < len(prompt_ids) else None
                row = {"step": step, "group": i // h.group_size, "prompt_id": pid, "prompt": prompts[i],
                       "completion": completions[i],
                       "rewards": {name: _num(rpf[i, j].item()) for j, name in enumerate(self.reward_func_names)},
                       "total": _num(total[i].item()), "advantage": round(adv[i].item(), 6)}
                if pid not in self._rendered_seen and i < len(rendered):
                    # what the model saw (chat template, special tokens), once per prompt id
                    self._rendered_seen.add(pid)
                    row["prompt_rendered"] = rendered[i]
                f.write(json.dumps(row) + "\n")


def _num(x: float):
    return None if math.isnan(x) else round(x, 6)


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
