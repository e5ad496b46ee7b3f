"""rlft's own PPO trainer (Schulman et al. 2017, as applied to LMs by Ziegler et al. 2019).

Why rlft writes it: TRL 1.x removed its PPOTrainer and value-head model (trl#7020), so there is no
maintained PPO to subclass. This is a `transformers.Trainer` whose `train` is PPO's own loop, so it
keeps the run lifecycle every rlft stage shares (callbacks for metrics, console, health and
interruption; `_save_checkpoint` with optimizer, scheduler and RNG state; `save_model`; the
accelerator for DDP). The math is in `rlft.algos` (GAE, whitening, clipped losses, KL estimators,
the adaptive KL controller); this module only moves tensors between the model and those functions.

One update: sample `batch_size` episodes -> one no-grad pass of policy+value (rollout log-probs and
values) and one of the reference (adapter disabled) -> rewards on the last token, -kl_coef * kl_t
on every token -> GAE -> advantages whitened over the update's whole batch (all processes) -> `ppo_epochs`
passes over shuffled minibatches of `mini_batch_size` episodes, an optimizer step every
`gradient_accumulation_steps` minibatches.
A `step` in metrics.jsonl and checkpoints is one update.

With an environment (`env.name`) an episode is multi-turn (`rlft.rollout.episodes`): the env's step
rewards sit on each turn's last action token, observation tokens are masked out of the loss and
skipped by GAE, so the advantage runs across the whole episode (verl's multi-turn PPO).

transformers' private Trainer methods used here are listed in rlft/trainers/trl_private.py.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from transformers import Trainer, TrainerState
from trl.trainer.utils import disable_dropout_in_model

from rlft.algos import (
    ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, LoopSchedule, behaviour_weights, entropy_from_logits, explained_variance,
    default_horizon, kl_sample_train, make_kl_controller, masked_mean, masked_moments, ppo_loop_schedule, ppo_loss,
    return_scale, shape_rewards, value_bias_from_returns,
)
from rlft.config.stages import get_spec
from rlft.models.value_head import PolicyWithValueHead
from rlft.monitor.metrics import eval_row
from rlft.runtime.sharding import is_fsdp
from rlft.rollout import CompletionLog, RewardLog, SamplingParams, sample, score
from rlft.rollout.episodes import collate_episodes, episode_metrics, run_episodes
from rlft.rollout.offpolicy import (
    GenerationWorker, LearnerClock, sampler_copy, staleness_metrics, take_fresh, trainable_weights,
)

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig
    from rlft.rollout import Rollouts, Scores
    from rlft.run import RunDir


@dataclass
class PPOBatch:
    """One update's episodes on this process, laid out for the learner: B rows of a left-padded prompt (P
    tokens) and a completion (T tokens); L = P + T. Filled in two steps: sampling (ids, masks, the sampler's
    log-probs) and the update's rollout (rewards, the learner's log-probs and values, advantages)."""
    input_ids_BL: Tensor
    attention_mask_BL: Tensor
    position_ids_BL: Tensor                 # as generate() numbers positions
    prompt_len: int                         # P
    mask_BT: Tensor                         # 1 on action tokens: loss, GAE and metrics run over these
    logp_sampler_BT: Tensor                 # the sampler's log-probs of the drawn tokens
    rollouts: Rollouts | None = None        # single-turn: what rollout.sample drew
    episodes: list | None = None            # multi-turn: one rlft.rollout.episodes.Episode per row
    env_rewards_BT: Tensor | None = None    # multi-turn: step rewards on each turn's last action token
    logp_behaviour_BT: Tensor | None = None  # async: the sampler copy's log-probs (it drew with older weights)
    rows: list[dict] | None = None          # the data rows sampled from
    scores: Scores | None = None            # single-turn: the rewards of each completion
    logp_old_BT: Tensor | None = None       # the learner's log-probs before the update (the ratio's denominator)
    values_old_BT: Tensor | None = None     # its values, 0 off the mask
    advantages_BT: Tensor | None = None
    returns_BT: Tensor | None = None
    metrics: dict = field(default_factory=dict)  # the update's rollout metrics

    def select(self, idx: Tensor) -> PPOBatch:
        """The rows `idx` (a minibatch): every per-row tensor and list indexed; the update's own records
        (rollouts, scores, metrics) stay with the whole batch."""
        rows = idx.tolist()
        kept = {"prompt_len": self.prompt_len}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                kept[f.name] = value[idx]
            elif f.name in ("rows", "episodes") and value is not None:
                kept[f.name] = [value[i] for i in rows]
        return PPOBatch(**kept)


class RlftPPOTrainer(Trainer):
    """PPO on `cfg.ppo` (with `cfg.train`, `cfg.env`, `cfg.monitor`); a subclass may run another section's
    algorithm on the same loop (rlft.trainers.grpo_episodes)."""
    advantage_estimator = "gae"           # in rlft.algos.ADVANTAGE_ESTIMATORS
    policy_loss = "ppo"                   # in rlft.algos.POLICY_LOSSES

    def __init__(self, model: PolicyWithValueHead, args, processing_class, cfg: RlftConfig,
                 train_rows: list[dict], reward_suite, evaluation=None, callbacks=None, run: RunDir | None = None,
                 eval_out: dict | None = None, ref_model=None, env_factory=None, env_guard=None,
                 episode_eval_rows: list[dict] | None = None):
        super().__init__(model=model, args=args, processing_class=processing_class, callbacks=callbacks)
        self.cfg = cfg
        # the algorithm's keys: the section of the stage being run (ppo, or grpo over episodes)
        self.section = sec = getattr(cfg, get_spec(cfg.stage).section)
        self.schedule: LoopSchedule = self.make_schedule(cfg, len(train_rows))
        self.train_rows = train_rows
        self.evaluation = evaluation  # policy -> {"reward_mean", "n", ...} on the evaluation prompts, or None
        self.reward_suite = reward_suite
        mon = cfg.monitor
        self.completion_log = CompletionLog(run.completions if run is not None else None, mon.log_completions)
        reward_logs = run.root / "reward_logs.jsonl" if run is not None and mon.reward_logs and reward_suite else None
        self.reward_log = RewardLog(reward_logs)  # what the rewards printed, per update and function
        if reward_suite is not None:
            reward_suite.capture_logs(reward_logs is not None)
        self.eval_out = eval_out if eval_out is not None else {}  # the run's summary.json `eval` (start/end)
        self.reloader = None  # monitor.reward_hot_reload: changed reward files and overrides.yaml, per update
        if run is not None and mon.reward_hot_reload and reward_suite is not None:
            from rlft.rewards.reload import RewardReloader

            self.reloader = RewardReloader(reward_suite, run.root / "overrides.yaml")
        self.ref_model = ref_model  # an explicit reference checkpoint; None = the adapter-disabled policy
        coef = self.initial_kl_coef
        # the horizon counts updates; unset, a tenth of this run's (the controller acts within the run)
        horizon = sec.kl_horizon or default_horizon(self.schedule.num_updates)
        self.kl_ctl = make_kl_controller(coef, sec.target_kl, sec.adaptive_kl and coef > 0, horizon)
        self.eval_start: dict | None = None
        self.return_moments = torch.zeros(3, dtype=torch.float64)  # episode returns so far: sum, squares, count
        self.return_scale = 1.0
        self.env_factory = env_factory  # () -> SafeEnv; None = single-turn completions scored by rewards
        self.env_guard = env_guard
        self._envs: list = []
        self.episode_eval_rows = episode_eval_rows or []
        self._worker: GenerationWorker | None = None  # the async sampler (<section>.async.max_steps_off_policy)
        self._clock: LearnerClock | None = None
        self._async_metrics: dict = {}
        if env_factory is not None and self.episode_eval_rows:
            self.evaluation = self._evaluate_episodes  # eval.start / eval.end as episode return and success rate
        self.current_flos = 0
        world = self.accelerator.num_processes
        s = self.schedule
        if s.batch_size % world or s.mini_batch_size % world:
            from rlft.run import RunError

            raise RunError(f"ppo.batch_size ({s.batch_size}) and ppo.mini_batch_size ({s.mini_batch_size}) must be "
                           f"divisible by the {world} processes: each process takes an equal share of both")
        self.local_batch = s.batch_size // world  # episodes, and minibatches, are split over the processes
        self.local_mini = s.mini_batch_size // world
        disable_dropout_in_model(model)  # the rollout's log-probs must be what the learner computes

    # --- what a subclass running another algorithm on this loop changes -------------------------
    def make_schedule(self, cfg: RlftConfig, num_rows: int) -> LoopSchedule:
        return ppo_loop_schedule(cfg)

    @property
    def initial_kl_coef(self) -> float:
        return self.cfg.ppo.init_kl_coef

    @property
    def kl_estimator(self) -> str:
        """The per-token KL estimate in the reward (a name in rlft.algos.KL_ESTIMATORS)."""
        return self.cfg.ppo.kl_penalty

    def loss(self, mb: PPOBatch, logp_BT: Tensor, values_BT: Tensor, logits_BTV: Tensor) -> tuple[Tensor, dict]:
        """The minibatch's loss and metrics from the learner's forward pass over it."""
        p = self.cfg.ppo
        return ppo_loss(logp_BT, mb.logp_old_BT, mb.advantages_BT, values_BT * mb.mask_BT, mb.values_old_BT,
                        mb.returns_BT, entropy_from_logits(logits_BTV), mb.mask_BT, clip_range=p.clip_range,
                        clip_range_value=p.cliprange_value, vf_coef=p.vf_coef, ent_coef=p.ent_coef,
                        policy_loss=self.policy_loss, clip_ratio_c=p.clip_ratio_c,
                        train_policy=not self.critic_warming_up)

    @property
    def critic_warming_up(self) -> bool:
        """This update trains only the value head (`ppo.critic_warmup`; a section without the key: never)."""
        return self.state.global_step < getattr(self.section, "critic_warmup", 0)

    # --- state rlft keeps in each checkpoint ---------------------------------------------------
    def rlft_extra_state(self) -> dict:
        return {"eval_start": self.eval_start, "return_moments": self.return_moments.tolist()}

    def load_rlft_extra_state(self, state: dict) -> None:
        if state.get("return_moments") is not None:  # a resumed run scales its returns as the uninterrupted one
            self.return_moments = torch.tensor(state["return_moments"], dtype=torch.float64)
            self.return_scale = return_scale(self.return_moments)
        self.eval_start = state.get("eval_start")
        if self.eval_start is not None:
            self.eval_out["start"] = self.eval_start

    @property
    def policy(self):
        return self.accelerator.unwrap_model(self.model).policy

    # --- saving: PEFT adapter (or full model) + value head --------------------------------------
    gathers_to_save = True  # save_model gathers FSDP shards itself (runtime.final.save_whole_model)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        output_dir = output_dir or self.args.output_dir
        self.accelerator.wait_for_everyone()
        sharded = is_fsdp(self.accelerator)
        # FSDP: every rank takes part in gathering the weights, rank 0 gets them all (on the CPU)
        state = self.accelerator.get_state_dict(self.model) if sharded else None
        if not self.args.should_save:
            return
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        unwrapped = self.accelerator.unwrap_model(self.model)
        if state is None:
            unwrapped.policy.save_pretrained(output_dir)
            unwrapped.save_value_head(output_dir)
            return
        policy_state = {k.removeprefix("policy."): v for k, v in state.items() if k.startswith("policy.")}
        unwrapped.policy.save_pretrained(output_dir, state_dict=policy_state)
        unwrapped.save_value_head(output_dir, {k.removeprefix("value_head."): v for k, v in state.items()
                                               if k.startswith("value_head.")})

    def _load_checkpoint(self, ckpt: str) -> None:
        self.load_weights_from(ckpt)
        self._load_optimizer_and_scheduler(ckpt)
        self._load_rng_state(ckpt)
        self.state = TrainerState.load_from_json(str(Path(ckpt) / "trainer_state.json"))

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None) -> None:
        """transformers' weight-loading entry (used to redo an interrupted final save): adapter + value head."""
        self.load_weights_from(resume_from_checkpoint)

    def load_weights_from(self, ckpt) -> None:
        """Policy adapter (or full weights) and value head of a checkpoint (resume, health rollback)."""
        from rlft.models.weights import load_weights_into

        if is_fsdp(self.accelerator):  # the checkpoint's whole-model file, into the shards
            from accelerate.utils import load_fsdp_model

            load_fsdp_model(self.accelerator.state.fsdp_plugin, self.accelerator, self.model, str(ckpt))
            return
        unwrapped = self.accelerator.unwrap_model(self.model)
        load_weights_into(unwrapped.policy, ckpt)
        unwrapped.load_value_head(ckpt)

    # --- sampling ----------------------------------------------------------------------------
    def _rows_for_update(self, update: int) -> list[dict]:
        """This process's prompts for an update: a fresh seeded permutation per pass over the data,
        a pure function of the update index so a resumed run samples the same prompts."""
        n = len(self.train_rows)
        first = update * self.schedule.batch_size + self.accelerator.process_index * self.local_batch
        rows = []
        for e in range(first, first + self.local_batch):
            epoch, i = divmod(e, n)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.cfg.train.seed + epoch))
            rows.append(self.train_rows[int(perm[i])])
        return rows

    def _params(self) -> SamplingParams:
        sec = self.section
        return SamplingParams(temperature=sec.temperature, top_p=sec.top_p, max_new_tokens=sec.max_tokens)

    def _envs_for(self, n: int, pool: list | None = None) -> list:
        """n environment instances from `pool` (the learner's by default), one per episode slot, reused across
        updates."""
        pool = self._envs if pool is None else pool
        while len(pool) < n:
            pool.append(self.env_factory())
        return pool[:n]

    def _sample_episodes(self, rows: list[dict], sampler=None, params: SamplingParams | None = None) -> PPOBatch:
        """One multi-turn episode per row, laid out like `_sample` plus the per-token step rewards (`params`: the
        evaluation's sampling settings instead of training's)."""
        cfg = self.cfg
        policy, tok, envs = sampler or (self.policy, self.processing_class, self._envs_for(len(rows)))
        eps = run_episodes(policy, tok, envs, rows, [cfg.train.seed] * len(rows),
                           params or self._params(), cfg.env.max_episode_length, cfg.train.max_seq_length,
                           prompt_ids=[row.get("prompt_id", row.get("task_id", i)) for i, row in enumerate(rows)])
        return self._episodes_batch(eps, tok)

    def _episodes_batch(self, eps: list, tok) -> PPOBatch:
        """Episodes laid out for the learner's forward pass (GRPO's dynamic sampling picks them from several
        samplings first)."""
        device = self.accelerator.device
        b = collate_episodes(eps, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
        prompt_ids, prompt_mask = b.prompt_ids_BP.to(device), b.prompt_mask_BP.to(device)
        attn = torch.cat([prompt_mask, b.attention_mask_BT.to(device)], dim=1)
        position_ids = (attn.cumsum(1) - 1).clamp_min(0)
        return PPOBatch(input_ids_BL=torch.cat([prompt_ids, b.completion_ids_BT.to(device)], dim=1),
                        attention_mask_BL=attn, position_ids_BL=position_ids, prompt_len=prompt_ids.shape[1],
                        mask_BT=b.action_mask_BT.to(device), logp_sampler_BT=b.logprobs_BT.to(device), episodes=eps,
                        env_rewards_BT=b.rewards_BT.to(device))

    def _sample(self, rows: list[dict], sampler=None) -> PPOBatch:
        """One completion per row through the rollout layer, laid out for the learner's forward pass.
        `sampler`: (policy, tokenizer, envs) to sample with instead of the learner's (the async sampler)."""
        if self.env_factory is not None:
            return self._sample_episodes(rows, sampler)
        device = self.accelerator.device
        policy, tok, _ = sampler or (self.policy, self.processing_class, None)
        r = sample(policy, tok, [row["prompt"] for row in rows], 1, self._params(),
                   prompt_ids=[row.get("prompt_id", i) for i, row in enumerate(rows)])
        prompt_ids, prompt_mask = r.prompt_ids_BP.to(device), r.prompt_mask_BP.to(device)
        completion_ids = r.completion_ids_BT.to(device)
        attn = torch.cat([prompt_mask, torch.ones_like(completion_ids)], dim=1)
        position_ids = (attn.cumsum(1) - 1).clamp_min(0)  # as generate() numbers positions
        return PPOBatch(input_ids_BL=torch.cat([prompt_ids, completion_ids], dim=1), attention_mask_BL=attn,
                        position_ids_BL=position_ids, prompt_len=prompt_ids.shape[1],
                        mask_BT=r.completion_mask_BT.to(device).float(), logp_sampler_BT=r.logprobs_BT.to(device),
                        rollouts=r)

    def _score(self, rows: list[dict], rollouts, count: bool = True):
        columns = {k: [row.get(k) for row in rows] for k in rows[0] if k not in ("prompt", "prompt_id")}
        if self.reloader is not None:
            self.reloader.remember(rollouts.row_prompt_texts(), rollouts.completions, columns)
        scores = score(rollouts, self.reward_suite, columns, count=count)  # may stop the run (failure guard)
        totals = torch.tensor([float("nan") if t is None else t for t in scores.total], device=self.accelerator.device)
        return scores, totals

    def _forward(self, model, batch: PPOBatch, with_values: bool = True):
        """Per-token log-probs, values and logits of the completion tokens (position t-1 predicts t)."""
        ids, attn, pos = batch.input_ids_BL, batch.attention_mask_BL, batch.position_ids_BL
        P = batch.prompt_len
        if with_values:
            logits, values = model(input_ids=ids, attention_mask=attn, position_ids=pos)
            values_BT = values[:, P - 1:-1]
        else:
            logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False).logits
            values_BT = None
        logits_BTV = logits[:, P - 1:-1].float() / self.section.temperature
        logp_BTV = torch.log_softmax(logits_BTV, dim=-1)
        logp_BT = logp_BTV.gather(-1, ids[:, P:].unsqueeze(-1)).squeeze(-1)
        return logp_BT, values_BT, logits_BTV, logp_BTV

    @torch.no_grad()
    def _reference_logps(self, batch: PPOBatch):
        if self.ref_model is not None:
            return self._forward(self.ref_model, batch, with_values=False)
        policy = self.policy
        if hasattr(policy, "disable_adapter"):
            with policy.disable_adapter():
                return self._forward(policy, batch, with_values=False)
        return None  # full fine-tuning with no reference checkpoint: no KL penalty

    # --- one update ----------------------------------------------------------------------------
    @torch.no_grad()
    def rollout(self, update: int) -> PPOBatch:
        p = self.cfg.ppo
        rows = self._rows_for_update(update)
        batch = self._sampled(update, rows)
        episodes = batch.episodes
        if episodes is not None:
            reward_metrics = self._episode_metrics(episodes)
        else:
            self._reload_rewards()
            batch.scores, scores_B = self._score(rows, batch.rollouts)
            reward_metrics = self.reward_suite.metrics()
            logs = self.reward_suite.pop_logs()  # every rank pops; the main process writes its own calls
            if self.accelerator.is_main_process:
                self.reward_log.write(update + 1, logs)
        mask = batch.mask_BT
        logp_old, values_old, _, logp_old_BTV, weights_BT = self._behaviour_logps(batch)
        ref = self._reference_logps(batch) if self.initial_kl_coef > 0 or self.ref_model is not None else None
        if ref is not None:
            logp_ref, _, _, logp_ref_BTV = ref
            kl_BT = KL_ESTIMATORS.get(self.kl_estimator)(logp_old, logp_ref, logp_old_BTV, logp_ref_BTV)
            kl_policy_ref = masked_mean(logp_old - logp_ref, mask)  # per-token mean log-ratio, as GRPO logs it
        else:
            kl_BT = torch.zeros_like(logp_old)
            kl_policy_ref = None
        if episodes is not None:  # step rewards already sit on each turn's last action token
            rewards_BT = batch.env_rewards_BT - self.kl_ctl.value * kl_BT * mask
        else:
            rewards_BT = shape_rewards(scores_B, kl_BT, mask, self.kl_ctl.value)
        if p.scale_returns:  # the critic's targets at about unit scale (see ppo.scale_returns)
            rewards_BT = rewards_BT / self._return_scale(rewards_BT, mask)
        if p.value_init == "first_batch_mean" and update == 0:  # a fresh run's first batch (resumes start later)
            values_old = values_old + self._init_value_bias(rewards_BT, mask)
        # several processes: whitened over the global batch (the moments summed over them), as verl whitens
        whole_batch = {"sum_over_processes": self._sum_over_processes} if self.accelerator.num_processes > 1 else {}
        adv_BT, returns_BT = ADVANTAGE_ESTIMATORS.get(self.advantage_estimator)(
            rewards_BT=rewards_BT, values_BT=values_old * mask, mask_BT=mask, gamma=p.gamma, lam=p.lam, **whole_batch)
        if weights_BT is not None:  # a stale batch: the sampler's gap to the learner as an importance weight
            adv_BT = adv_BT * weights_BT
        batch.rows, batch.logp_old_BT, batch.values_old_BT = rows, logp_old, values_old * mask
        batch.advantages_BT, batch.returns_BT = adv_BT, returns_BT
        valid = ~torch.isnan(scores_B) if episodes is None else torch.ones(len(rows), dtype=torch.bool)
        batch.metrics = {
            **reward_metrics,
            "kl_policy_ref": self._mean(kl_policy_ref) if kl_policy_ref is not None else None,
            "kl_penalty": self._mean(masked_mean(kl_BT, mask)),
            "kl_coef": self.kl_ctl.value,
            **({"return_scale": self.return_scale} if p.scale_returns else {}),
            "advantage_mean": self._mean(masked_mean(adv_BT, mask)),
            "return_mean": self._mean(masked_mean(returns_BT, mask)),
            "value_mean": self._mean(masked_mean(values_old, mask)),
            "explained_variance": explained_variance(values_old * mask, returns_BT, mask),
            "completion_length": self._mean(mask.sum(1).mean()),
            "frac_unscored": self._mean((~valid).float().mean()),
            # completions cut at max_tokens without an EOS (episodes: turns, in reward_metrics)
            **({"frac_truncated": self._mean(1.0 - sum(batch.rollouts.finished) / max(1, len(batch.rollouts)))}
               if episodes is None else {}),
            **({"reward_version": float(self.reloader.version)} if self.reloader is not None else {}),
            **self._sample_train_kl(batch, logp_old, mask),
        }
        return batch

    @torch.no_grad()
    def _init_value_bias(self, rewards_BT: Tensor, mask_BT: Tensor) -> float:
        """Set the value head's bias to the batch's mean discounted return (the mean over processes, so every rank
        sets the same); returns the shift, which moves every value by the same amount (the head is linear), so
        the batch's values need no second forward pass."""
        bias = self._mean(value_bias_from_returns(rewards_BT, mask_BT, self.cfg.ppo.gamma))
        head = self.accelerator.unwrap_model(self.model).value_head.bias
        shift = bias - float(head.full_tensor() if hasattr(head, "full_tensor") else head)
        head.add_(shift)
        return shift

    def _reload_rewards(self) -> None:
        """Changed reward files and overrides.yaml take effect from this update (every rank checks the same files);
        the reloaded function is probed on a completion of the last update."""
        if self.reloader is None:
            return
        for message in self.reloader.check():
            if self.accelerator.is_main_process:
                logging.getLogger("rlft").warning("hot reload: %s", message)

    def _behaviour_logps(self, batch: PPOBatch):
        """(logp_old, values, logits, logp_BTV, weights_BT): the learner's forward pass over the batch. Its
        log-probs are the clipped ratio's denominator (the proximal policy). Where an async sampler drew the
        batch with older weights, weights_BT = pi_learner / pi_sampler per token multiplies the advantages
        (decoupled PPO, rlft.algos.behaviour_weights); None when the learner sampled the batch itself."""
        logp, values, logits, logp_BTV = self._forward(self.model, batch)
        behaviour = batch.logp_behaviour_BT
        if behaviour is None:
            return logp, values, logits, logp_BTV, None
        w = behaviour_weights(logp, behaviour, batch.mask_BT)
        self._async_metrics["async/behaviour_weight_mean"] = self._mean(masked_mean(w, batch.mask_BT))
        return logp, values, logits, logp_BTV, w

    def _sample_train_kl(self, batch: PPOBatch, logp_learner, mask) -> dict:
        """kl_sample_train_v1/v2 between the policy that sampled the batch and the learner now."""
        sampler = batch.logp_behaviour_BT if batch.logp_behaviour_BT is not None else batch.logp_sampler_BT
        return {k: self._mean(v) for k, v in kl_sample_train(sampler, logp_learner, mask).items()}

    # --- sampling ahead (max_steps_off_policy) --------------------------------------------------
    def _sampled(self, update: int, rows: list[dict]) -> PPOBatch:
        """This update's batch: sampled now by the learner, or taken from the async sampler (re-sampled now
        when it is older than the limit)."""
        if self._worker is None:
            return self._sample(rows)
        item, staleness = take_fresh(self._worker, self._clock, update, self.section.async_.max_steps_off_policy)
        self._async_metrics["time/generation_s"] = item.span[1] - item.span[0]
        self._async_metrics["async/dropped"] = float(len(rows)) if staleness is None else 0.0
        self._async_metrics.update(staleness_metrics([staleness or 0]))
        return self._sample(rows) if staleness is None else item.payload

    def _start_sampler(self, first_update: int) -> None:
        """A copy of the policy (with its own tokenizer and environments) sampling in a thread."""
        import copy

        sampler, load = sampler_copy(self.policy)
        tokenizer, envs = copy.deepcopy(self.processing_class), []  # its own: neither is safe to share with a thread

        def generate(rows, chunks):
            with torch.no_grad():
                pool = self._envs_for(len(rows), envs) if self.env_factory else None
                batch = self._sample(rows, (sampler, tokenizer, pool))
                batch.logp_behaviour_BT = self._forward(sampler, batch, with_values=False)[0]
            yield batch

        def batches():
            update = first_update
            while update < self.schedule.num_updates:
                yield update, self._rows_for_update(update)
                update += 1

        self._worker = GenerationWorker(batches(), generate, load, self.section.async_.max_steps_off_policy,
                                        first_version=first_update).start()
        self._clock = LearnerClock()

    def _episode_metrics(self, episodes) -> dict:
        """Episode statistics (mean over processes), `reward`/`reward_std` = the episode return; the env
        failure guard counts this update's faults (it may stop the run, exit 4)."""
        m = episode_metrics(episodes)
        if self.env_guard is not None:
            faults = [t["fault"] for ep in episodes for t in ep.turns if t.get("fault")]
            self.env_guard.record(len(episodes), sum(ep.failed for ep in episodes), faults[-1] if faults else None)
        out = {k: self._mean(v) for k, v in m.items()}
        for k in ("episodes_truncated", "episodes_failed"):  # counts, summed over processes
            out[k] = out[k] * self.accelerator.num_processes
        out["reward"], out["reward_std"] = out["episode_return"], out["episode_return_std"]
        return out

    def optimize(self, batch: PPOBatch) -> dict:
        """ppo_epochs passes over shuffled minibatches; returns the mean training metrics."""
        model, acc = self.model, self.accelerator
        n = self.local_batch
        mb = min(self.local_mini, n)
        accum = self.schedule.minibatches_per_step
        sums: dict[str, float] = {}
        count = 0
        grad_norms = []
        gen = torch.Generator().manual_seed(self.cfg.train.seed * 100003 + self.state.global_step)
        # a critic warm-up update: the value loss still reaches the shared backbone's (LoRA) weights, so their
        # gradients are dropped before each step; a parameter without a gradient is skipped by the optimizer,
        # its weights and moment estimates untouched
        frozen = self._policy_params() if self.critic_warming_up else []
        model.train()
        for _ in range(self.section.ppo_epochs):
            order = torch.randperm(n, generator=gen).to(acc.device)
            minibatches = [order[i:i + mb] for i in range(0, n, mb)]
            for k, idx in enumerate(minibatches):
                minibatch = batch.select(idx)
                logp, values, logits_BTV, _ = self._forward(model, minibatch)
                loss, m = self.loss(minibatch, logp, values, logits_BTV)
                m["loss"] = float(loss.detach())
                acc.backward(loss / accum)
                last_in_step = (k + 1) % accum == 0 or k + 1 == len(minibatches)
                if last_in_step:
                    for param in frozen:
                        param.grad = None
                    grad_norm = acc.clip_grad_norm_(model.parameters(), self.args.max_grad_norm)
                    grad_norms.append(float(grad_norm))
                    self.optimizer.step()
                    self.lr_scheduler.step()
                    self.optimizer.zero_grad(set_to_none=True)
                for key, v in m.items():
                    sums[key] = sums.get(key, 0.0) + v
                count += 1
        out = {k: self._mean(torch.tensor(v / count)) for k, v in sums.items()}
        out["grad_norm"] = sum(grad_norms) / len(grad_norms)
        out["learning_rate"] = self.lr_scheduler.get_last_lr()[0]
        return out

    def _policy_params(self) -> list:
        """The trainable parameters outside the value head (the policy's: LoRA's, or all of them)."""
        head = {id(q) for q in self.accelerator.unwrap_model(self.model).value_head.parameters()}
        return [q for q in self.model.parameters() if q.requires_grad and id(q) not in head]

    def _return_scale(self, rewards_BT: Tensor, mask_BT: Tensor) -> float:
        """This batch's episode returns added to the run's (every process's) moments; their standard deviation."""
        returns_B = (rewards_BT * mask_BT).sum(1)
        batch = masked_moments(returns_B, torch.ones_like(returns_B))
        if self.accelerator.num_processes > 1:
            batch = self._sum_over_processes(batch.to(self.accelerator.device)).cpu()
        self.return_moments = self.return_moments + batch.cpu()
        self.return_scale = return_scale(self.return_moments)
        return self.return_scale

    def _sum_over_processes(self, t: Tensor) -> Tensor:
        """`t` summed over the processes (every rank takes part): the global batch's whitening moments."""
        return self.accelerator.reduce(t, reduction="sum")

    def _mean(self, x) -> float:
        """Mean over processes of a scalar."""
        t = torch.as_tensor(x, dtype=torch.float32, device=self.accelerator.device).reshape(1)
        if self.accelerator.num_processes > 1:
            t = self.accelerator.gather(t)
        return float(t.mean())

    # --- evaluation ----------------------------------------------------------------------------
    @torch.no_grad()
    def _evaluate_episodes(self, policy) -> dict:
        """Mean episode return and success rate of fresh episodes per evaluation row (`eval:` over the stage's
        defaults: one episode at its sampling settings; pass@n counts a row whose best return reaches
        eval.pass_threshold), with a fixed seed and the training RNG untouched; env faults here stay out of the
        failure guard."""
        from rlft.config.eval_sampling import EvalSettings, eval_sampling
        from rlft.rollout import sampling_params
        from rlft.rollout.eval_stats import prompt_stats

        sec = self.section
        settings = eval_sampling(self.cfg, EvalSettings(n=1, max_new_tokens=sec.max_tokens,
                                                        temperature=sec.temperature, top_p=sec.top_p))
        rows = [row for row in self.episode_eval_rows for _ in range(settings.n)]  # row-major, n episodes each
        params = sampling_params(settings, self.cfg.train.seed, None)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(params.seed)
            eps = self._sample_episodes(rows, params=dataclasses.replace(params, seed=None)).episodes
        m = episode_metrics(eps)
        return {**prompt_stats([ep.return_ for ep in eps], settings.n, settings.pass_threshold),
                "reward_mean": round(m["episode_return"], 6), "success_rate": round(m["success_rate"], 6),
                "episode_length": round(m["episode_length"], 6), "n": len(eps), "prompts": len(self.episode_eval_rows),
                "sampling": settings.as_dict()}

    def evaluate_reward(self, step: int | None = None) -> dict | None:
        """Fresh samples on the evaluation prompts (rollout.evaluate: its own seed, training RNG untouched); with a
        step, single-turn samples go to completions.jsonl as `eval-<i>` rows."""
        if self.evaluation is None:
            return None
        if self.evaluation == self._evaluate_episodes:
            return self.evaluation(self.policy)
        return self.evaluation(self.policy, step)

    def _write_completions(self, batch: PPOBatch) -> None:
        if not self.accelerator.is_main_process:
            return
        mask = batch.mask_BT
        adv_B = (batch.advantages_BT * mask).sum(1) / mask.sum(1).clamp_min(1)
        if batch.episodes is not None:  # whole episodes: every turn's action, observation and reward
            n = self.completion_log.rows_to_write(len(batch.episodes))
            if n:
                import json

                with open(self.completion_log.path, "a") as f:
                    for ep, a in zip(batch.episodes[:n], adv_B):
                        row = {"step": self.state.global_step, **ep.log_row(), "advantage": round(float(a), 6)}
                        f.write(json.dumps(row) + "\n")
            return
        self.completion_log.write_rollouts(self.state.global_step, batch.rollouts, batch.scores,
                                           advantages=[round(float(a), 6) for a in adv_B],
                                           extra={"return": [round(float(g), 6) for g in batch.returns_BT[:, 0]],
                                                  **({"reward_version": [self.reloader.version] * len(adv_B)}
                                                     if self.reloader is not None else {})})

    # --- the loop ------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | None = None, **kwargs):
        s, args = self.schedule, self.args
        self.create_optimizer_and_scheduler(num_training_steps=s.num_updates * s.optimizer_steps_per_update)
        self.model, self.optimizer, self.lr_scheduler = self.accelerator.prepare(
            self.model, self.optimizer, self.lr_scheduler)
        self.model_wrapped = self.model
        self.state = self._fresh_state()
        if resume_from_checkpoint:
            self._load_checkpoint(resume_from_checkpoint)
        self.state.max_steps = s.num_updates
        self.state.logging_steps, self.state.save_steps = s.log_every, s.save_every
        self.state.is_local_process_zero = self.is_local_process_zero()
        self.state.is_world_process_zero = self.is_world_process_zero()
        self.control = self.callback_handler.on_train_begin(args, self.state, self.control)
        try:
            return self._loop()
        finally:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None

    def _loop(self):
        s, args = self.schedule, self.args
        while self.state.global_step < s.num_updates:
            if self.eval_start is None and self.state.global_step == 0:
                self.eval_start = self.evaluate_reward(0)
                if self.eval_start is not None:
                    self.eval_out["start"] = self.eval_start
            if self.section.async_.max_steps_off_policy is not None:  # the sampler may start on this update's weights
                if self._worker is None:
                    self._start_sampler(self.state.global_step)  # a resumed run starts with empty queues
                self._worker.publish(self.state.global_step, trainable_weights(self.policy))
                self._clock.begin()
                self._async_metrics = {}
            self.control = self.callback_handler.on_step_begin(args, self.state, self.control)
            started = time.perf_counter()
            warming = self.critic_warming_up  # this update trains the value head alone
            batch = self.rollout(self.state.global_step)
            metrics = {**batch.metrics, **self.optimize(batch)}
            if getattr(self.section, "critic_warmup", 0):
                metrics["critic_warmup"] = float(warming)
            metrics["step_time"] = time.perf_counter() - started  # sampling and optimizing, as TRL's GRPO rows
            if self._worker is not None:
                metrics.update(self._async_metrics, **self._clock.end(self._worker.sampling_spans(time.perf_counter())))
            kl = metrics.get("kl_policy_ref")
            # once per update, the horizon in updates; not on a warm-up update, which leaves the policy (its KL) as is
            if kl is not None and not warming:
                self.kl_ctl.update(kl, 1)
            self.state.global_step += 1
            episodes = self.state.global_step * s.batch_size
            metrics["episodes"] = episodes
            self.state.epoch = episodes / max(len(self.train_rows), 1)
            self._write_completions(batch)
            self.control = self.callback_handler.on_step_end(args, self.state, self.control)
            last = self.state.global_step == s.num_updates
            if self.state.global_step % s.log_every == 0 or self.state.global_step == 1 or last:
                self.log(metrics)
            if self.state.global_step % s.eval_every == 0 and not last and self.evaluation is not None:
                self.log(eval_row(self.evaluate_reward(self.state.global_step)))
            if self.state.global_step % s.save_every == 0 or self.control.should_save:
                self._save_checkpoint(self.model, trial=None)
                self.control = self.callback_handler.on_save(args, self.state, self.control)
                self.control.should_save = False
            if self.control.should_training_stop:
                break
        if self.state.global_step >= s.num_updates and self.evaluation is not None:
            self.eval_out["end"] = self.evaluate_reward(self.state.global_step)
        self.control = self.callback_handler.on_train_end(args, self.state, self.control)
        return self.state

    def _fresh_state(self) -> TrainerState:
        from transformers.trainer_callback import ExportableState

        exportable = [cb for cb in self.callback_handler.callbacks + [self.control] if isinstance(cb, ExportableState)]
        return TrainerState(is_local_process_zero=self.is_local_process_zero(),
                            is_world_process_zero=self.is_world_process_zero(), stateful_callbacks=exportable)
