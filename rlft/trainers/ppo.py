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

The loop and the update live here; sampling is the rollout collector's (rlft.rollout.collector), evaluation the
loop evaluator's (rlft.trainers.loop_evaluator), and the advantage estimator and policy loss are picked by name
(rlft.algos.loop_algorithm, rlft.trainers.advantage_steps), so GRPO over episodes runs on this loop as a
configuration. transformers' private Trainer methods used here are listed in rlft/trainers/trl_private.py.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from transformers import Trainer, TrainerState
from trl.trainer.utils import disable_dropout_in_model

from rlft.algos import LoopState, approx_kl, default_horizon, masked_mean
from rlft.algos.loop_algorithm import LoopAlgorithm, ppo_algorithm
from rlft.config.stages import get_spec
from rlft.models.value_head import PolicyWithValueHead
from rlft.rollout.collector import RolloutCollector, RolloutSources
from rlft.rollout.ppo_batch import PPOBatch, reference_logps, token_logps
from rlft.rollout.processes import Processes, mean_over_processes
from rlft.trainers.advantage_steps import LearnerPass, Sampled, StepSettings, advantage_step, sampler_weights
from rlft.trainers.loop_evaluator import LoopEvaluator
from rlft.trainers.grad_clip import clip_each_part
from rlft.trainers.step_rollback import UpdateGuard
from rlft.trainers.value_head_io import ValueHeadCheckpoints

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig
    from rlft.rundir.folder import RunDir

__all__ = ["PPOBatch", "RlftPPOTrainer"]


class RlftPPOTrainer(ValueHeadCheckpoints, Trainer):
    """PPO on `cfg.ppo` (with `cfg.train`, `cfg.env`, `cfg.monitor`); `algorithm` runs another section's algorithm
    on the same loop (GRPO over episodes: rlft.algos.loop_algorithm.episode_grpo_algorithm)."""

    def __init__(self, model: PolicyWithValueHead, args, processing_class, cfg: RlftConfig,
                 train_rows: list[dict], reward_suite, evaluation=None, callbacks=None, run: RunDir | None = None,
                 ref_model=None, env_factory=None, env_guard=None,
                 episode_eval_rows: list[dict] | None = None, algorithm: LoopAlgorithm | None = None):
        super().__init__(model=model, args=args, processing_class=processing_class, callbacks=callbacks)
        self.cfg = cfg
        # the algorithm's keys: the section of the stage being run (ppo, or grpo over episodes)
        self.section = sec = getattr(cfg, get_spec(cfg.stage).section)
        self.algorithm = algorithm or ppo_algorithm(cfg)
        self.estimator_step = advantage_step(self.algorithm.estimator)  # its advantages and loss
        self.schedule = s = self.algorithm.schedule
        self.train_rows = train_rows
        self.ref_model = ref_model  # an explicit reference checkpoint; None = the adapter-disabled policy
        coef = self.algorithm.initial_kl_coef
        # the horizon counts updates; unset, a tenth of this run's (the controller acts within the run)
        horizon = sec.kl_horizon or default_horizon(s.num_updates)
        # what the loop carries from one update to the next (KL coefficient, return moments, eval.start)
        self.loop_state = LoopState.fresh(coef, sec.target_kl, sec.adaptive_kl and coef > 0, horizon)
        self.step_settings = StepSettings(self.algorithm, sec, getattr(getattr(cfg, "sampling", None), "tis_cap", None),
                                          Processes(self.accelerator))
        self.current_flos = 0
        # episodes, and minibatches, are split over the processes
        self.local_batch, self.local_mini = s.local_sizes(self.accelerator.num_processes)
        self.collector = RolloutCollector(cfg, self.algorithm, train_rows, self.accelerator, processing_class,
                                          RolloutSources(self.policy, reward_suite, run, env_factory, env_guard))
        self.evaluator = LoopEvaluator(cfg, sec, self.collector, evaluation, episode_eval_rows)
        self.ran_to_end = False  # the loop left after its last update (not stopped by an error): eval.end is due
        disable_dropout_in_model(model)  # the rollout's log-probs must be what the learner computes

    @property
    def policy(self):
        return self.accelerator.unwrap_model(self.model).policy

    @property
    def critic_warming_up(self) -> bool:
        """This update trains only the value head (`ppo.critic_warmup`; a section without the key: never)."""
        return self.state.global_step < getattr(self.section, "critic_warmup", 0)

    # --- state rlft keeps in each checkpoint ---------------------------------------------------
    def rlft_state_dict(self) -> dict:
        return self.loop_state.state_dict()

    def load_rlft_state_dict(self, state: dict) -> None:
        self.loop_state = self.loop_state.load(state)

    # --- one update ----------------------------------------------------------------------------
    def _forward(self, model, batch: PPOBatch, with_values: bool = True):
        """Per-token log-probs, values and logits of the completion tokens (rlft.rollout.ppo_batch.token_logps)."""
        return token_logps(model, batch, self.section.temperature, with_values)

    @torch.no_grad()
    def rollout(self, update: int) -> PPOBatch:
        """This update's batch sampled and scored, with the learner's log-probs and values and its advantages (the
        estimator's step: a new loop state, and on a fresh run's first update maybe the value head's bias moved)."""
        batch, reward_metrics, scores_B = self.collector.collect(update)
        reloader = self.collector.reloader
        sampled = Sampled(reward_metrics, scores_B, float(reloader.version) if reloader is not None else None)
        adv, batch.metrics, self.loop_state = self.estimator_step.fn(
            batch, self.loop_state, self.step_settings, self.learner_pass(batch, update), sampled, update)
        adv.fill(batch)
        if adv.value_shift:
            self._value_head_bias().add_(adv.value_shift)
        return batch

    def learner_pass(self, batch: PPOBatch, update: int) -> LearnerPass:
        """The learner's and the reference's no-grad passes over the batch, with the sampler's gap as weights."""
        logp, values, _, logp_BTV = self._forward(self.model, batch)
        weights = sampler_weights(logp, batch, self.step_settings.tis_cap)
        if batch.logp_behaviour_BT is not None:  # logged with the async sampler's other metrics
            mean_weight = self._mean(masked_mean(weights, batch.mask_BT))
            self.collector.async_metrics["async/behaviour_weight_mean"] = mean_weight
        ref = None
        if self.estimator_step.wants_reference(self.loop_state, self.algorithm) or self.ref_model is not None:
            out = reference_logps(self.policy, self.ref_model, batch, self.section.temperature)
            ref = (out[0], out[3]) if out is not None else None
        head_bias = None
        if update == 0:  # ppo.value_init: first_batch_mean moves it by the batch's mean return
            head = self._value_head_bias()
            head_bias = float(head.full_tensor() if hasattr(head, "full_tensor") else head)
        return LearnerPass(logp, values, logp_BTV, weights, ref, head_bias)

    def _value_head_bias(self) -> Tensor:
        return self.accelerator.unwrap_model(self.model).value_head.bias

    def loss(self, mb: PPOBatch, logp_BT: Tensor, values_BT: Tensor, logits_BTV: Tensor) -> tuple[Tensor, dict]:
        """The minibatch's loss and metrics from the learner's forward pass over it."""
        return self.estimator_step.loss(self.step_settings, mb, logp_BT, values_BT, logits_BTV,
                                        not self.critic_warming_up)

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
        frozen = acc.unwrap_model(model).policy_parameters() if self.critic_warming_up else []
        guard = UpdateGuard(self.section, model, self.optimizer, self.lr_scheduler,
                            self.schedule.optimizer_steps_per_update)
        stopped = False
        model.train()
        for _ in range(self.section.ppo_epochs):
            order = torch.randperm(n, generator=gen).to(acc.device)
            minibatches = [order[i:i + mb] for i in range(0, n, mb)]
            for k, idx in enumerate(minibatches):
                minibatch = batch.select(idx)
                logp, values, logits_BTV, _ = self._forward(model, minibatch)
                loss, m = self.loss(minibatch, logp, values, logits_BTV)
                if guard.checks_at(k, accum) and guard.stops(self._mean(torch.tensor(m["approx_kl"]))):
                    stopped = True  # early_stop_kl, or rollback_kl undid the last step: no further passes
                    break
                m["loss"] = float(loss.detach())
                acc.backward(loss / accum)
                if (k + 1) % accum == 0 or k + 1 == len(minibatches):  # the step's last minibatch
                    for param in frozen:
                        param.grad = None
                    grad_norms.append(clip_each_part(acc, model, self.args.max_grad_norm))
                    guard.before_step()
                    self.optimizer.step()
                    self.lr_scheduler.step()
                    self.optimizer.zero_grad(set_to_none=True)
                    guard.stepped()
                for key, v in m.items():
                    sums[key] = sums.get(key, 0.0) + v
                count += 1
            if stopped:
                break
        if guard.last_step_unchecked:  # the update's last step, checked on one of its minibatches
            guard.stops(self._drift(batch.select(minibatches[0])))
        out = {k: self._mean(torch.tensor(v / count)) for k, v in sums.items()}
        out.update(guard.finish())
        out["grad_norm"] = sum(grad_norms) / len(grad_norms)
        out["learning_rate"] = self.lr_scheduler.get_last_lr()[0]
        return out

    @torch.no_grad()
    def _drift(self, mb: PPOBatch) -> float:
        """The mean approx KL (as the loss logs it) of `mb` from the policy that sampled it, all processes."""
        logp_BT = self._forward(self.model, mb)[0]
        return self._mean(approx_kl(logp_BT - mb.logp_old_BT, mb.train_mask_BT))

    def _mean(self, x) -> float:
        return mean_over_processes(self.accelerator, x)

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
        st = self.state  # fresh or loaded, set for this run's schedule and processes
        st.max_steps, st.logging_steps, st.save_steps = s.num_updates, s.log_every, s.save_every
        st.is_local_process_zero, st.is_world_process_zero = self.is_local_process_zero(), self.is_world_process_zero()
        # what the callbacks are handed (HF's Trainer.train sets these too): a resume's changed learning rate is
        # put into the checkpoint's optimizer and scheduler there (monitor/callbacks.py ApplyConfigChanges)
        handler = self.callback_handler
        handler.model, handler.optimizer, handler.lr_scheduler = self.model, self.optimizer, self.lr_scheduler
        self.control = handler.on_train_begin(args, self.state, self.control)
        try:
            return self._loop()
        finally:
            self.collector.stop()

    def _loop(self):
        s, args = self.schedule, self.args
        while self.state.global_step < s.num_updates:
            # the policy as trained now (an async sampler may start on these weights)
            self.collector.begin_update(self.state.global_step, self.policy)
            self.control = self.callback_handler.on_step_begin(args, self.state, self.control)
            started = time.perf_counter()
            warming = self.critic_warming_up  # this update trains the value head alone
            batch = self.rollout(self.state.global_step)
            metrics = {**batch.metrics, **self.optimize(batch)}
            if getattr(self.section, "critic_warmup", 0):
                metrics["critic_warmup"] = float(warming)
            metrics["step_time"] = time.perf_counter() - started  # sampling and optimizing, as TRL's GRPO rows
            metrics.update(self.collector.end_update_metrics())
            kl = metrics.get("kl_policy_ref")
            # once per update, the horizon in updates; not on a warm-up update, which leaves the policy (its KL) as is
            if kl is not None and not warming:
                self.loop_state = self.loop_state.with_kl(kl, 1)
            self.state.global_step += 1
            episodes = self.state.global_step * s.batch_size
            metrics["episodes"] = episodes
            self.state.epoch = episodes / max(len(self.train_rows), 1)
            self.collector.write_completions(self.state.global_step, batch)
            self.control = self.callback_handler.on_step_end(args, self.state, self.control)
            last = self.state.global_step == s.num_updates
            if self.state.global_step % s.log_every == 0 or self.state.global_step == 1 or last:
                self.log(metrics)
            if self.state.global_step % s.save_every == 0 or self.control.should_save:
                self._save_checkpoint(self.model, trial=None)
                self.control = self.callback_handler.on_save(args, self.state, self.control)
                self.control.should_save = False
            if self.control.should_training_stop:
                break
        self.ran_to_end = self.state.global_step >= s.num_updates  # interrupted after the last update too
        self.control = self.callback_handler.on_train_end(args, self.state, self.control)
        return self.state

    def _fresh_state(self) -> TrainerState:
        from transformers.trainer_callback import ExportableState

        exportable = [cb for cb in self.callback_handler.callbacks + [self.control] if isinstance(cb, ExportableState)]
        return TrainerState(stateful_callbacks=exportable)
