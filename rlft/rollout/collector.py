"""The sampling side of rlft's own loop (PPO, GRPO over episodes): which rows an update samples, sampling them
(single-turn completions or multi-turn episodes, now or ahead in a thread), scoring them, and their
completions.jsonl and reward logs. It knows no trainer: the learner hands it the policy it trains (at the start
and each update) and reads back a `PPOBatch`."""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import Tensor

from rlft import progress as shown
from rlft.rollout import CompletionLog, RewardLog, SamplingParams, sample, score
from rlft import run_files
from rlft.rollout.episodes import collate_episodes, episode_metrics, run_episodes
from rlft.rollout.sampler import SamplerSettings, make_sampler
from rlft.rollout.offpolicy import (
    GenerationWorker, LearnerClock, sampler_copy, staleness_metrics, take_fresh, trainable_weights,
)
from rlft.rollout.dynamic_sampling import DynamicSampling
from rlft.rollout.ppo_batch import PPOBatch, token_logps
from rlft.rollout.processes import Processes, mean_over_processes

if TYPE_CHECKING:
    from rlft.algos.loop_algorithm import LoopAlgorithm


@dataclass
class RolloutSources:
    """What the collector samples with and writes to: the policy the learner trains (replaced by each
    `begin_update`), the rewards, the run folder (None: nothing written), and for episodes the environment factory
    (() -> SafeEnv; None = single-turn completions scored by the rewards) and the env failure guard."""
    policy: Any
    reward_suite: Any = None
    run: Any = None
    env_factory: Callable | None = None
    env_guard: Any = None


class RolloutCollector:
    """Samples each update's batch for the learner, in the stage's section (`cfg.ppo`, or `cfg.grpo` over
    episodes)."""

    def __init__(self, cfg, algorithm: LoopAlgorithm, train_rows: list[dict], accelerator, tokenizer,
                 sources: RolloutSources):
        from rlft.config.stages import get_spec

        self.cfg, self.algorithm, self.train_rows = cfg, algorithm, train_rows
        self.section = getattr(cfg, get_spec(cfg.stage).section)
        self.accelerator, self.tokenizer, self.policy = accelerator, tokenizer, sources.policy
        reward_suite, run, env_factory, env_guard = sources.reward_suite, sources.run, sources.env_factory, \
            sources.env_guard
        self.local_batch = algorithm.schedule.batch_size // accelerator.num_processes
        self.reward_suite = reward_suite
        mon = cfg.monitor
        self.completion_log = CompletionLog(run.completions if run is not None else None, mon.log_completions)
        reward_logs = run.reward_logs if run is not None and mon.reward_logs and reward_suite else None
        self.reward_log = RewardLog(reward_logs)  # what the rewards printed, per update and function
        if reward_suite is not None:
            reward_suite.capture_logs(reward_logs is not None)
        self.reloader = None  # monitor.reward_hot_reload: changed reward files and overrides.yaml, per update
        if run is not None and mon.reward_hot_reload and reward_suite is not None:
            from rlft.rewards.reload import RewardReloader

            self.reloader = RewardReloader(reward_suite, run.root / run_files.OVERRIDES)
        self.env_factory = env_factory  # () -> SafeEnv; None = single-turn completions scored by rewards
        self.env_guard = env_guard
        self._envs: list = []
        self._worker: GenerationWorker | None = None  # the async sampler (<section>.async.max_steps_off_policy)
        self._clock: LearnerClock | None = None
        self.async_metrics: dict = {}
        self.dynamic = DynamicSampling(self.section, train_rows, self.local_batch, cfg.train.seed,
                                       Processes(accelerator)) if algorithm.dynamic_sampling else None
        self.label = "sampling"  # what the progress display calls this collection (the update, once known)
        # the learner's sampler (sampling.backend); the async sampler's copy of the policy samples with generate
        self.sampler = make_sampler(SamplerSettings.from_config(cfg), tokenizer)

    def mean(self, x) -> float:
        return mean_over_processes(self.accelerator, x)

    # --- which rows ------------------------------------------------------------------------------
    def rows_for_update(self, update: int) -> list[dict]:
        """This process's rows: local_batch / group_size distinct rows, each repeated group_size times (contiguous,
        so group i is rows [i*G, (i+1)*G)), from a fresh seeded permutation per pass over the data: a pure function
        of the update index, so a resumed run samples the same prompts."""
        G, n = self.algorithm.group_size, len(self.train_rows)
        per_update, local = self.algorithm.schedule.batch_size // G, self.local_batch // G
        first = update * per_update + self.accelerator.process_index * local
        rows = []
        for e in range(first, first + local):
            epoch, i = divmod(e, n)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.cfg.train.seed + epoch))
            rows += [self.train_rows[int(perm[i])]] * G
        return rows

    # --- sampling --------------------------------------------------------------------------------
    def params(self) -> SamplingParams:
        sec = self.section
        return SamplingParams(temperature=sec.temperature, top_p=sec.top_p, max_new_tokens=sec.max_tokens)

    def envs_for(self, n: int, pool: list | None = None) -> list:
        """n environment instances from `pool` (the learner's by default), one per episode slot, reused across
        updates."""
        pool = self._envs if pool is None else pool
        while len(pool) < n:
            pool.append(self.env_factory())
        return pool[:n]

    def sample_episodes(self, rows: list[dict], sampler=None, params: SamplingParams | None = None) -> PPOBatch:
        """One multi-turn episode per row, laid out like `sample` plus the per-token step rewards (`params`: the
        evaluation's sampling settings instead of training's)."""
        cfg = self.cfg
        policy, tok, envs = sampler or (self.policy, self.tokenizer, self.envs_for(len(rows)))
        label = "eval episodes" if params is not None else self.label  # shown by the main thread only
        with shown.task(label, total=len(rows), unit="episodes") as bar:
            eps = run_episodes(policy, tok, envs, rows, [cfg.train.seed] * len(rows),
                               params or self.params(), cfg.env.max_episode_length, cfg.train.max_seq_length,
                               prompt_ids=[row.get("prompt_id", row.get("task_id", i)) for i, row in enumerate(rows)],
                               sampler=self.engine_for(policy), progress=bar.callback())
        return self.episodes_batch(eps, tok)

    def episodes_batch(self, eps: list, tok) -> PPOBatch:
        """Episodes laid out for the learner's forward pass (dynamic sampling picks them from several samplings
        first)."""
        device = self.accelerator.device
        b = collate_episodes(eps, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
        prompt_ids, prompt_mask = b.prompt_ids_BP.to(device), b.prompt_mask_BP.to(device)
        attn = torch.cat([prompt_mask, b.attention_mask_BT.to(device)], dim=1)
        position_ids = (attn.cumsum(1) - 1).clamp_min(0)
        return PPOBatch(input_ids_BL=torch.cat([prompt_ids, b.completion_ids_BT.to(device)], dim=1),
                        attention_mask_BL=attn, position_ids_BL=position_ids, prompt_len=prompt_ids.shape[1],
                        mask_BT=b.action_mask_BT.to(device), logp_sampler_BT=b.logprobs_BT.to(device), episodes=eps,
                        env_rewards_BT=b.rewards_BT.to(device))

    def sample(self, rows: list[dict], sampler=None) -> PPOBatch:
        """One completion (or episode) per row through the rollout layer, laid out for the learner's forward pass.
        `sampler`: (policy, tokenizer, envs) to sample with instead of the learner's (the async sampler)."""
        if self.env_factory is not None:
            return self.sample_episodes(rows, sampler)
        device = self.accelerator.device
        policy, tok, _ = sampler or (self.policy, self.tokenizer, None)
        engine, prompts = self.engine_for(policy), [row["prompt"] for row in rows]
        ids = [row.get("prompt_id", i) for i, row in enumerate(rows)]
        with shown.task(self.label, total=len(rows), unit="completions") as bar:  # the main thread's only
            r = sample(policy, tok, prompts, 1, self.params(), prompt_ids=ids, progress=bar.callback()) \
                if engine is None else engine.sample(prompts, self.params(), 1, prompt_ids=ids, progress=bar.callback())
        prompt_ids, prompt_mask = r.prompt_ids_BP.to(device), r.prompt_mask_BP.to(device)
        completion_ids = r.completion_ids_BT.to(device)
        attn = torch.cat([prompt_mask, torch.ones_like(completion_ids)], dim=1)
        position_ids = (attn.cumsum(1) - 1).clamp_min(0)  # as generate() numbers positions
        return PPOBatch(input_ids_BL=torch.cat([prompt_ids, completion_ids], dim=1), attention_mask_BL=attn,
                        position_ids_BL=position_ids, prompt_len=prompt_ids.shape[1],
                        mask_BT=r.completion_mask_BT.to(device).float(), logp_sampler_BT=r.logprobs_BT.to(device),
                        rollouts=r)

    def engine_for(self, policy):
        """The learner's sampler synced to `policy` (its weights pushed when they changed since the last sampling);
        None for the async sampler's copy, which samples with generate itself."""
        if policy is not self.policy:
            return None
        self.sampler.sync(policy)
        return self.sampler

    # --- one update's batch ----------------------------------------------------------------------
    @torch.no_grad()
    def collect(self, update: int) -> tuple[PPOBatch, dict, Tensor | None]:
        """(batch, reward metrics, scores_B): this update's rows sampled and scored; scores_B (NaN = unscored) for
        single-turn completions, None for episodes (their rewards are the env's, in batch.env_rewards_BT)."""
        rows = self.rows_for_update(update)
        self.label = f"update {update + 1}/{self.algorithm.schedule.num_updates} sampling"
        if self.dynamic is not None:  # validation refuses it with async: every batch is sampled here, now
            episodes, rows, dynamic = self.dynamic.episodes(update, rows, lambda r: self.sample_episodes(r).episodes)
            batch = self.episodes_batch(episodes, self.tokenizer)
        else:
            batch, dynamic = self.sampled(update, rows), {}
        batch.rows = rows
        if batch.episodes is not None:
            return batch, {**self.episode_metrics(batch.episodes), **dynamic}, None
        self._reload_rewards()
        batch.scores, scores_B = self._score(rows, batch.rollouts)
        reward_metrics = self.reward_suite.metrics()
        logs = self.reward_suite.pop_logs()  # every rank pops; the main process writes its own calls
        if self.accelerator.is_main_process:
            self.reward_log.write(update + 1, logs)
        return batch, reward_metrics, scores_B

    def _score(self, rows: list[dict], rollouts, count: bool = True):
        columns = {k: [row.get(k) for row in rows] for k in rows[0] if k not in ("prompt", "prompt_id")}
        if self.reloader is not None:
            self.reloader.remember(rollouts.row_prompt_texts(), rollouts.completions, columns)
        scores = score(rollouts, self.reward_suite, columns, count=count)  # may stop the run (failure guard)
        totals = torch.tensor([float("nan") if t is None else t for t in scores.total], device=self.accelerator.device)
        return scores, totals

    def _reload_rewards(self) -> None:
        """Changed reward files and overrides.yaml take effect from this update (every rank checks the same files);
        the reloaded function is probed on a completion of the last update."""
        if self.reloader is None:
            return
        for message in self.reloader.check():
            if self.accelerator.is_main_process:
                logging.getLogger("rlft").warning("hot reload: %s", message)

    def episode_metrics(self, episodes) -> dict:
        """Episode statistics (mean over processes), `reward`/`reward_std` = the episode return; the env
        failure guard counts this update's faults (it may stop the run, exit 4)."""
        m = episode_metrics(episodes)
        if self.env_guard is not None:
            faults = [t["fault"] for ep in episodes for t in ep.turns if t.get("fault")]
            self.env_guard.record(len(episodes), sum(ep.failed for ep in episodes), faults[-1] if faults else None)
        out = {k: self.mean(v) for k, v in m.items()}
        for k in ("episodes_truncated", "episodes_failed"):  # counts, summed over processes
            out[k] = out[k] * self.accelerator.num_processes
        out["reward"], out["reward_std"] = out["episode_return"], out["episode_return_std"]
        return out

    # --- sampling ahead (max_steps_off_policy) ---------------------------------------------------
    def begin_update(self, update: int, policy) -> None:
        """`policy`: the one the learner trains this update (the same module, or its prepared wrapper's). With an
        async sampler: started on the first update (a resumed run starts with empty queues), handed this update's
        weights (it may start sampling on them)."""
        self.policy = policy
        if self.section.async_.max_steps_off_policy is None:
            return
        if self._worker is None:
            self._start_sampler(update)
        self._worker.publish(update, trainable_weights(self.policy))
        self._clock.begin()
        self.async_metrics = {}

    def end_update_metrics(self) -> dict:
        """The async sampler's metrics for the update that just ended ({} without one)."""
        if self._worker is None:
            return {}
        import time

        return {**self.async_metrics, **self._clock.end(self._worker.sampling_spans(time.perf_counter()))}

    def stop(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def sampled(self, update: int, rows: list[dict]) -> PPOBatch:
        """This update's batch: sampled now by the learner, or taken from the async sampler (re-sampled now
        when it is older than the limit)."""
        if self._worker is None:
            return self.sample(rows)
        item, staleness = take_fresh(self._worker, self._clock, update, self.section.async_.max_steps_off_policy)
        self.async_metrics["time/generation_s"] = item.span[1] - item.span[0]
        self.async_metrics["async/dropped"] = float(len(rows)) if staleness is None else 0.0
        self.async_metrics.update(staleness_metrics([staleness or 0]))
        return self.sample(rows) if staleness is None else item.payload

    def _start_sampler(self, first_update: int) -> None:
        """A copy of the policy (with its own tokenizer and environments) sampling in a thread."""
        sampler, load = sampler_copy(self.policy)
        tokenizer, envs = copy.deepcopy(self.tokenizer), []  # its own: neither is safe to share with a thread

        def generate(rows, chunks):
            with torch.no_grad():
                pool = self.envs_for(len(rows), envs) if self.env_factory else None
                batch = self.sample(rows, (sampler, tokenizer, pool))
                batch.logp_behaviour_BT = token_logps(sampler, batch, self.section.temperature, with_values=False)[0]
            yield batch

        def batches():
            update = first_update
            while update < self.algorithm.schedule.num_updates:
                yield update, self.rows_for_update(update)
                update += 1

        self._worker = GenerationWorker(batches(), generate, load, self.section.async_.max_steps_off_policy,
                                        first_version=first_update).start()
        self._clock = LearnerClock()

    # --- completions.jsonl -----------------------------------------------------------------------
    def write_completions(self, step: int, batch: PPOBatch) -> None:
        if self.accelerator.is_main_process:
            write_batch_completions(self.completion_log, step, batch,
                                    self.reloader.version if self.reloader is not None else None)


def write_batch_completions(log: CompletionLog, step: int, batch: PPOBatch, reward_version=None) -> None:
    """An update's rows in completions.jsonl, each with its mean advantage: whole episodes (every turn's action,
    observation and reward), or single-turn completions with their return (and the rewards' version under
    monitor.reward_hot_reload); `masked` on the rows mask_truncated left out of the loss."""
    mask = batch.mask_BT
    adv_B = (batch.advantages_BT * mask).sum(1) / mask.sum(1).clamp_min(1)
    # mask_truncated: the rows left out of the loss (their advantage still shown)
    masked_B = None if batch.loss_mask_BT is None else (batch.loss_mask_BT.sum(1) == 0) & (mask.sum(1) > 0)
    if batch.episodes is not None:
        n = log.rows_to_write(len(batch.episodes))
        if n:
            with open(log.path, "a") as f:
                for b, (ep, a) in enumerate(zip(batch.episodes[:n], adv_B)):
                    extra = {"masked": bool(masked_B[b])} if masked_B is not None else {}
                    f.write(json.dumps({"step": step, **ep.log_row(), "advantage": round(float(a), 6), **extra}) + "\n")
        return
    log.write_rollouts(step, batch.rollouts, batch.scores, advantages=[round(float(a), 6) for a in adv_B],
                       extra={"return": [round(float(g), 6) for g in batch.returns_BT[:, 0]],
                              **({"masked": [bool(m) for m in masked_B]} if masked_B is not None else {}),
                              **({"reward_version": [reward_version] * len(adv_B)}
                                 if reward_version is not None else {})})
