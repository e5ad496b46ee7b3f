"""TRL's GRPOTrainer with rlft's group-advantage and KL-penalty hooks.

TRL generates; rlft scores and logs through its rollout layer: `_calculate_rewards` scores the
completions with the shared scorer (`rlft.rollout.score_texts`, the safe reward suite) and gathers
the scores over processes. TRL then computes advantages inline in `_generate_and_score_completions`;
we let it run, then replace `advantages` with rlft's own, computed by the pure functions in
`rlft.algos` from the gathered rewards, and slice this process's share back out. TRL's loss accepts
per-token (B, T) advantages, which carries the KL penalty folded into the advantage. Completions go
to completions.jsonl through the shared `rlft.rollout.CompletionLog`.

TRL's private names used here are listed in rlft/trainers/trl_private.py (checked against the installed TRL).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
from accelerate.utils import gather_object
from trl.trainer.utils import add_fused_lm_head
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict, use_adapter

from rlft.algos import (
    constant_group_mask, default_horizon, expand_group_mask, group_advantages, kl_penalty_advantages,
    kl_sample_train, make_kl_controller,
)
from rlft.data.messages import as_text
from rlft.rewards.safe import RewardSuite, SafeReward
from rlft.rollout import CompletionLog, RewardLog, score_texts
from rlft.rollout.score import ID_COLUMNS

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig
    from rlft.run import RunDir

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


class RlftGRPOTrainer(GRPOTrainer):
    """TRL's trainer with rlft's hooks acting on `cfg.grpo` (and `cfg.monitor`); `run`: the run folder its logs go
    to (None: no completions.jsonl, reward_logs.jsonl or reward hot reload)."""

    def __init__(self, *args, cfg: RlftConfig, run: RunDir | None = None, reward_suite=None, ref_model_for_kl=None,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = cfg
        g, mon = cfg.grpo, cfg.monitor
        self.reward_suite = reward_suite if reward_suite is not None else \
            _suite_from_funcs(self.reward_funcs, self.reward_func_names, self.reward_weights)
        self.completion_log = CompletionLog(run.completions if run is not None else None, mon.log_completions)
        self.reward_log = RewardLog(run.root / "reward_logs.jsonl" if run is not None and mon.reward_logs else None)
        if self.reward_suite is not None:
            self.reward_suite.capture_logs(self.reward_log.path is not None)
        self.reloader = None
        if run is not None and mon.reward_hot_reload and self.reward_suite is not None:
            from rlft.rewards.reload import RewardReloader

            self.reloader = RewardReloader(self.reward_suite, run.root / "overrides.yaml")
        self._batch_log: tuple[list, list, list] | None = None  # gathered (prompt ids, prompts, completions)
        self._rendered_seen: set = set()  # prompt ids whose rendered prompt completions.jsonl already holds
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
        out = self._trl_generate_and_score(inputs)
        if mode != "train":
            return out
        m = self._metrics[mode]
        m["reward_version"].append(float(self.reward_version))
        device = out["completion_ids"].device
        n_local = out["completion_ids"].size(0)
        rpf = self._rewards_per_func.to(device)
        weights = self.reward_weights.to(device)
        # a completion any weighted reward failed on has no total: excluded from its group's baseline
        valid = ~torch.isnan(rpf[:, weights != 0]).any(dim=1)
        total = torch.where(valid, (torch.nan_to_num(rpf) * weights).sum(dim=1), float("nan"))
        adv = group_advantages(total, g.group_size, g.baseline_mode, valid=valid)
        const_P = constant_group_mask(total, g.group_size, valid=valid)
        m["frac_constant_groups"].append(const_P.float().mean().item())
        m["frac_unscored"].append((~valid).float().mean().item())
        clipped = m.get("completions/clipped_ratio")
        if clipped:  # TRL's share of this batch's completions (gathered) cut at max_tokens without an EOS
            m["frac_truncated"].append(clipped[-1])
        if self.reward_suite is not None:
            local = self.reward_suite.metrics()  # this step's window: error counts (and it drains the window)
            for name in self.reward_suite.names:
                errs = torch.tensor(local[f"rewards/{name}/errors"], device=device)
                m[f"rewards/{name}/errors"].append(self.accelerator.gather(errs).sum().item())
            self.reward_suite.record(valid.numel(), (~valid).sum().item())  # may stop the run

        start = self.accelerator.process_index * n_local
        local = slice(start, start + n_local)
        adv_local = adv[local]
        completion_mask = out["completion_mask"]
        if g.remove_constant_reward_groups:
            keep_local = ~expand_group_mask(const_P, g.group_size)[local]
            completion_mask = completion_mask * keep_local.unsqueeze(1).to(completion_mask.dtype)
            out["completion_mask"] = completion_mask
            out["num_items_in_batch"] = self.accelerator.gather(completion_mask.sum()).sum()
            m["groups_removed"].append(const_P.float().sum().item())

        if g.kl_penalty_coef > 0:
            if g.kl_penalty_mode == "advantage":
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
                                                         self.kl_ctl.value, g.kl_discount_factor)
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
        m["kl_coef"].append(self.kl_ctl.value if g.kl_penalty_coef > 0 else 0.0)
        self._write_completions(out, rpf, total, adv)
        if self.reward_suite is not None:
            rows = self.reward_suite.pop_logs()  # every rank pops; the main process writes its own calls
            if self.accelerator.is_main_process:
                self.reward_log.write(self.state.global_step + 1, rows)
        return out

    def _starts_iteration(self) -> bool:
        """This call samples the first (here: the only) part of a training iteration's batch: the KL
        controller and reward reloads act once per iteration."""
        return True

    def _trl_generate_and_score(self, inputs) -> dict:
        """TRL's own sampling, scoring and batching (a subclass may hand it completions sampled elsewhere)."""
        return super()._generate_and_score_completions(inputs)

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
        if self.cfg.grpo.kl_penalty_mode == "loss" and self.beta != 0 and kl_hist:
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

    # --- completions.jsonl ---------------------------------------------------------------------
    def _write_completions(self, out, rpf, total, adv) -> None:
        """One row per completion of the gathered batch (up to monitor.log_completions), main process only."""
        if self._batch_log is None:
            return
        # sampled token counts (the report's lengths; decoded text re-tokenizes to other counts); every rank gathers
        tokens = self.accelerator.gather(out["completion_mask"].sum(dim=1)).tolist()
        rendered = self._rendered_prompts(out)  # every rank takes part in the gather
        if not self.accelerator.is_main_process:
            return
        ids, prompts, completions = self._batch_log
        if len(completions) != total.numel():
            return
        # the prompt exactly as the model saw it (chat template, special tokens), once per prompt id
        shown = [None] * len(completions)
        for i, pid in enumerate(ids[:self.completion_log.rows_to_write(len(completions))]):
            if pid not in self._rendered_seen and i < len(rendered):
                self._rendered_seen.add(pid)
                shown[i] = rendered[i]
        rewards = {name: rpf[:, j].tolist() for j, name in enumerate(self.reward_func_names)}
        self.completion_log.write(self.state.global_step + 1, ids, prompts, completions, rewards, total.tolist(),
                                  advantages=adv.tolist(),
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
