"""GRPO with sampling ahead of the learner: streaming minibatches and async off-policy ("off-by-K").

rlft builds this on TRL's GRPOTrainer and its own rollout layer instead of wrapping
`trl.experimental.async_grpo`: that trainer needs a vLLM server for every run (it raises without vLLM),
so it cannot run on CPU or in CI, and it replaces the GRPOTrainer that rlft's hooks extend.

How one training iteration runs here (TRL's `_prepare_inputs` is the seam):
1. At the iteration boundary the learner publishes its trainable weights as version `i` (iterations done).
2. A `GenerationWorker` thread (rlft.rollout.offpolicy) samples batches with its own copy of the policy,
   at most `max_steps_off_policy` versions behind the learner, each batch in `chunks` whole-group pieces.
   Sampling is TRL's own generate path (`_generate_single_turn`) on the copy; the sampler's per-token
   log-probs come from one teacher-forced pass of the copy, so they are the learner's numerics.
3. The learner takes the chunks in order. A chunk older than the limit is dropped (counted) and
   re-sampled on the spot by the learner. Each chunk goes through rlft's normal scoring and hooks
   (rewards, group advantages, constant-group filter, KL in the advantage), with the sampler's log-probs
   as `old_per_token_logps`: TRL's importance-sampling / PPO loss then corrects for the lag, and
   `kl_sample_train_v1/v2` measure it.
4. Training on chunk c starts while the worker samples chunk c+1 (streaming), and with K >= 1 while it
   samples the next iterations' batches (async).

TRL's private names used here are listed in rlft/trainers/trl_private.py (checked against the installed TRL).
"""

from __future__ import annotations

import copy
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from trl.trainer.utils import pad, split_tensor_dict

from rlft.algos import POLICY_LOSSES, behaviour_weights, masked_mean
from rlft.rollout.offpolicy import (
    GenerationWorker, LearnerClock, sampler_copy, staleness_metrics, take_fresh, trainable_weights,
)
from rlft.trainers.grpo import RlftGRPOTrainer, _shuffle_groups

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig


@dataclass(frozen=True)
class Overlap:
    """How far sampling may run ahead of the learner, derived from `cfg.grpo` by `overlap_of`."""
    max_steps_off_policy: int       # training iterations the sampler's weights may lag (0 = on-policy)
    num_substeps: int               # optimizer steps per iteration (grpo.num_substeps)
    chunks: int                     # pieces each iteration's batch is handed over in (1 = whole)
    decoupled: bool                 # a clipped loss: clip against the learner, weight by pi_learner / pi_sampler


def overlap_of(cfg: RlftConfig) -> Overlap:
    """grpo.async (null = no lag) and grpo.stream_minibatch (null = the batch handed over whole; else
    num_substeps x num_minibatches chunks, gradients accumulated over a substep's)."""
    g = cfg.grpo
    stream = g.stream_minibatch.num_minibatches
    return Overlap(max_steps_off_policy=g.async_.max_steps_off_policy or 0, num_substeps=g.num_substeps,
                   chunks=g.num_substeps * stream if stream is not None else 1,
                   decoupled=POLICY_LOSSES.get(g.loss_fn).clipped)


class AsyncGRPOTrainer(RlftGRPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.accelerator.num_processes > 1:
            raise ValueError("streaming and async GRPO run in one process (the sampler is an in-process copy)")
        if self.cfg.grpo.dynamic_sampling:  # validate-config refuses it first (stages/grpo/spec.py)
            raise ValueError("grpo.dynamic_sampling is not with grpo.async or grpo.stream_minibatch: their batches "
                             "reach the learner before their groups are scored")
        self.overlap = overlap_of(self.cfg)
        self._worker: GenerationWorker | None = None
        self._iteration: int | None = None   # the training iteration being trained (= learner weights version)
        self._pregenerated: dict | None = None
        self._chunk_index = 0
        self._clock = LearnerClock()
        self._dropped_rows = 0          # completions dropped as too old, over the run
        self._dropped_since_log = 0

    # --- the sampler: a copy of the policy and TRL's generate path pointed at it ------------------
    def _make_worker(self, start: int) -> GenerationWorker:
        sampler, load = sampler_copy(self.accelerator.unwrap_model(self.model))
        # TRL's generate path, on the copy: a shallow view of this trainer whose model is the sampler and
        # whose tokenizer and metrics are its own (fast tokenizers are not safe to share across threads)
        view = copy.copy(self)
        view.model = view.model_wrapped = sampler
        view.processing_class = copy.deepcopy(self.processing_class)
        view._tokenizer = view.processing_class if not hasattr(view.processing_class, "tokenizer") \
            else view.processing_class.tokenizer
        view._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        micro = self.args.per_device_train_batch_size

        def generate(rows: list, chunks: int):
            """The whole batch in one generate call (one call is cheaper than several smaller ones), then each
            chunk's sampler log-probs, handed over as soon as they are ready."""
            with torch.no_grad():
                prompt_ids, images, mm = view._tokenize_prompts([r["prompt"] for r in rows])
                completion_ids, _ = view._generate_single_turn(prompt_ids, images, mm, self.num_generations)
            size = len(rows) // chunks
            for c in range(chunks):
                p, q = [list(x) for x in prompt_ids[c * size:(c + 1) * size]], \
                    [list(x) for x in completion_ids[c * size:(c + 1) * size]]
                with torch.no_grad():
                    logps = self._sampler_logps(view, sampler, p, q, micro)
                yield {"prompt_ids": p, "completion_ids": q, "logps": logps}

        return GenerationWorker(self._prompt_batches(start), generate, load,
                                self.overlap.max_steps_off_policy, self.overlap.chunks, first_version=start)

    def _sampler_logps(self, view, sampler, prompt_ids, completion_ids, micro: int) -> torch.Tensor:
        """(B, T) log-probs of the sampled tokens under the sampler, padded exactly as TRL pads the batch."""
        device = self.accelerator.device
        pad_id, mult = self._tokenizer.pad_token_id, self.pad_to_multiple_of
        prompt_BP = pad([torch.tensor(x) for x in prompt_ids], padding_value=pad_id, padding_side="left",
                        pad_to_multiple_of=mult)
        prompt_mask_BP = pad([torch.ones(len(x), dtype=torch.long) for x in prompt_ids], padding_value=0,
                             padding_side="left", pad_to_multiple_of=mult)
        completion_BT = pad([torch.tensor(x) for x in completion_ids], padding_value=pad_id, padding_side="right",
                            pad_to_multiple_of=mult)
        completion_mask_BT = pad([torch.ones(len(x), dtype=torch.long) for x in completion_ids], padding_value=0,
                                 padding_side="right", pad_to_multiple_of=mult)
        ids_BL = torch.cat([prompt_BP, completion_BT], 1).to(device)
        mask_BL = torch.cat([prompt_mask_BP, completion_mask_BT], 1).to(device)
        logp_BT = view._get_per_token_logps_and_entropies(sampler, ids_BL, mask_BL, completion_BT.size(1),
                                                          batch_size=micro)[0]
        return logp_BT.cpu()

    def _prompt_batches(self, start: int):
        """(iteration, rows) from the iteration `start` on, in the order TRL's sampler gives the dataloader
        (same sampler class and seed), so an on-policy run trains on the same prompts as synchronous GRPO."""
        rows_per_batch = self.args.generation_batch_size
        repeat = self.args.steps_per_generation * self.num_iterations
        index = 0
        sampler = self._get_train_sampler()
        while True:
            produced, buf, seen = 0, [], 0
            for i in sampler:
                buf.append(i)
                if len(buf) < rows_per_batch:
                    continue
                if seen % repeat == 0:
                    if index >= start:
                        yield index, [dict(self.train_dataset[j]) for j in buf]
                    index += 1
                    produced += 1
                seen += 1
                buf = []
            if not produced:
                raise RuntimeError(f"the training data holds fewer prompts than one batch ({rows_per_batch} rows)")

    # --- the learner's side ---------------------------------------------------------------------
    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        k = self._step % self.args.steps_per_generation
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            self._begin_iteration()
        while k >= len(self._buffered_inputs):
            self._buffered_inputs.extend(self._next_chunk())
        return self._buffered_inputs[k]

    def _begin_iteration(self) -> None:
        if self._worker is None:
            per_iteration = self.overlap.num_substeps * self.num_iterations
            self._iteration = math.ceil(self.state.global_step / per_iteration)  # resume: fresh queues from here
            self._worker = self._make_worker(self._iteration).start()
        else:
            for k, v in self._clock.end(self._worker.sampling_spans(time.perf_counter())).items():
                self._metrics["train"][k].append(v)
            self._iteration += 1
        self._clock.begin()
        self._worker.publish(self._iteration, trainable_weights(self.accelerator.unwrap_model(self.model)))
        self._buffered_inputs = []
        self._chunk_index = 0

    def _next_chunk(self) -> list[dict]:
        item, staleness = take_fresh(self._worker, self._clock, self._iteration, self.overlap.max_steps_off_policy)
        m = self._metrics["train"]
        if staleness is None:  # too old: re-sampled now by the learner, on-policy
            self._dropped_rows += len(item.rows)
            self._dropped_since_log += len(item.rows)
            self._pregenerated, staleness = None, 0
        else:
            self._pregenerated = item.payload
        m["time/generation_s"].append(item.span[1] - item.span[0])
        for k, v in staleness_metrics([staleness]).items():
            m[k].append(v)
        try:
            out = self._generate_and_score_completions(item.rows)
        finally:
            self._pregenerated = None
        if self.overlap.decoupled and staleness > 0:
            self._decouple(out)
        self._chunk_index += 1
        out = _shuffle_groups(out, self.cfg.grpo.group_size)
        per_chunk = self.args.steps_per_generation // self.overlap.chunks
        return split_tensor_dict(out, per_chunk)

    def _decouple(self, out: dict) -> None:
        """Decoupled PPO for a stale batch (rlft.algos.behaviour_weights): PPO's clip against the learner's
        log-probs now (one more forward pass), the sampler's lag as a truncated weight on the advantages.
        Clipping against the stale sampler instead would leave most tokens outside the clip range."""
        logp_prox_BT = self._logps(self.model, out, use_ref=False)
        weights_BT = behaviour_weights(logp_prox_BT, out["old_per_token_logps"], out["completion_mask"].float())
        adv = out["advantages"]  # (B,) group advantages, or (B, T) with the KL folded in
        out["advantages"] = (adv.unsqueeze(1) if adv.dim() == 1 else adv) * weights_BT
        out["old_per_token_logps"] = logp_prox_BT
        weight_mean = masked_mean(weights_BT, out["completion_mask"]).item()
        self._metrics["train"]["async/behaviour_weight_mean"].append(weight_mean)

    def _starts_iteration(self) -> bool:
        return self._chunk_index == 0

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        pre = self._pregenerated
        if pre is None or not self.model.training:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        if [list(p) for p in prompt_ids] != pre["prompt_ids"]:
            raise RuntimeError("the sampler's prompts differ from the batch's")
        return [list(c) for c in pre["completion_ids"]], None

    def _trl_generate_and_score(self, inputs) -> dict:
        pre = self._pregenerated
        out = super()._trl_generate_and_score(inputs)
        if pre is not None:  # the sampler's, padded as TRL padded these rows: TRL's ratio is pi_learner / pi_sampler
            out["old_per_token_logps"] = pre["logps"].to(out["completion_ids"].device)
        if self.overlap.chunks > 1:  # TRL's dapo normaliser expects the whole batch's token count
            out["num_items_in_batch"] = out["num_items_in_batch"] * self.overlap.chunks
        return out

    def log(self, logs, start_time=None):
        if self.model.training and "loss" in logs:  # a count per logged step, not a mean over chunks
            self._metrics["train"]["async/dropped"] = [float(self._dropped_since_log)]
            self._dropped_since_log = 0
        return super().log(logs, start_time)

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None
