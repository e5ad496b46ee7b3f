"""The loop RS-SFT and AWR share: sample from the current policy -> score -> decide -> SFT, for a
number of rounds (expert iteration), each phase resumable. `SampledSFT` is the stage's parts of the run lifecycle
(rlft.runtime.lifecycle: prompts and rewards checked before the run folder -> policy (trained rounds' adapter on
--resume) -> eval.start -> the rounds, the last one saving final/ -> eval.end); `RoundSampler` draws a round's
samples.

Per round r:
  1. sampling: `num_samples_per_prompt` completions for every prompt of data.train through the rollout
     layer (rlft.rollout.sample / score), appended to samples.jsonl one generate call at a time. Each
     call is seeded from (train.seed, round, first prompt), so a resumed run draws exactly what an
     uninterrupted one would have.
  2. decision (rlft/stages/{rs_sft,awr}/decide.py): RS-SFT's keep rule or AWR's weights, written back into the round's
     rows of samples.jsonl; the round's sampling metrics ride along every metrics.jsonl row of its
     training, with `round` and a `step` counted over all rounds.
  3. SFT on the round's pairs (TRL SFTTrainer / rlft's AWRSFTTrainer), continuing the same LoRA adapter.

Resume (`--resume`): rounds whose adapter is saved are skipped (the newest one is loaded); a round whose
samples carry the decision trains from its newest checkpoint without sampling again; otherwise sampling
continues after the last prompt written. With rounds > 1 each round checkpoints into
checkpoints/round-<r>/ and leaves its adapter in checkpoints/round-<r>/adapter/ once trained.

summary.json's eval.start / eval.end: mean total reward of fresh samples on the evaluation prompts
(data.eval_prompts of data.eval, or of data.train) from the starting and the final policy, same seed.

Multi-process (ddp, fsdp): each round's generate calls, and the evaluation's, are shared out over the ranks and
their rows gathered to every rank (rlft.rollout.split): from the same weights, the rows and eval numbers are the
ones a single process draws (metrics' `sampling/prompts_per_rank`: the most prompts one process sampled).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Callable

from rlft import progress as shown
from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.rundir.folder import COMPLETE_MARKER
from rlft.errors import RunError
from rlft.rundir.options import RunOptions
from rlft.runtime.lifecycle import PER_ROUND, Evaluation, Stage, StageInputs, run_stage
from rlft.stages.common.rounds import training_pairs
from rlft.stages.common.samples_log import SamplesLog
from rlft import run_files

def sft_trl_config(cfg: RlftConfig, output_dir: str, composed: Composed | None = None):
    """The one place rlft keys become a trl.SFTConfig for RS-SFT / AWR; `trl:` passthrough options go last."""
    from trl import SFTConfig

    from rlft.stages.common.trl_config import build_trl_config

    for key in ("packing", "padding_free"):
        if cfg.trl.get(key):
            raise RunError(f"trl.{key}: not supported by stage {cfg.stage}: its samples are trained one sequence "
                           f"at a time (AWR weighs each one)")
    args = dict(max_length=cfg.train.max_seq_length, completion_only_loss=None)  # None: TRL's prompt/completion rule
    args.update(cfg.trl)
    return build_trl_config(SFTConfig, cfg, output_dir, args, composed)


def round_metrics_callback(metrics: dict, step_offset: int):
    """A callback adding the round's sampling metrics, `round` and an all-rounds `step` to every training
    log; placed before rlft's MetricsWriter, which writes what it finds in the logs."""
    from transformers import TrainerCallback

    class RoundMetrics(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is not None and "train_runtime" not in logs:
                logs.update({k: v for k, v in metrics.items() if k not in logs})
                logs["step"] = step_offset + state.global_step

    return RoundMetrics()


class RoundSampler:
    """A round's samples: every prompt's completions drawn and scored, one seeded generate call at a time (shared
    out over the ranks), appended to samples.jsonl, then the decided rows written to completions.jsonl."""

    def __init__(self, cfg: RlftConfig, tokenizer, suite, ctx, log: SamplesLog, say: Callable):
        self.cfg, self.section = cfg, getattr(cfg, cfg.stage)
        self.n = self.section.num_samples_per_prompt
        self.tokenizer, self.suite, self.ctx, self.log, self.say = tokenizer, suite, ctx, log, say
        self.step = 0  # reward_logs.jsonl rows of a round's sampling carry the step it starts at
        self.prompts_by_rank: list[int] = []  # prompts each process sampled in the last round
        from rlft.rollout.sampler import SamplerSettings, make_sampler

        self.engine = make_sampler(SamplerSettings.from_config(cfg), tokenizer)  # sampling.backend

    def _params(self, seed: int | None):
        from rlft.rollout import SamplingParams

        s = self.section
        return SamplingParams(temperature=s.temperature, top_p=s.top_p, max_new_tokens=s.max_tokens,
                              batch_size=s.generation_batch_size, seed=seed)  # whole prompts per generate call

    def sample_round(self, r: int, model, prompts: list, columns: dict) -> tuple[int, list[dict]]:
        """Sample and score the round's prompts not yet in samples.jsonl: (0, the round's rows), or (the exit
        code of an interrupt, []).

        The prompts go `generation_batch_size` completions (whole prompts) per generate call, each call seeded
        from (train.seed, round, its first prompt). In a multi-process run the calls are shared out over the ranks
        (call k on rank k % world, rlft.rollout.split) and each call's rows, scored on the rank that drew them, are
        gathered to every rank after each wave of `world` calls: every process decides on the same rows in the
        same order, the rows a single process would have drawn. Rank 0 appends them to samples.jsonl wave by wave;
        the failure guard counts each call's scores in that order on every rank, and an interrupt on any rank
        stops every rank after the wave."""
        from rlft.rollout import RewardLog

        ctx = self.ctx
        done = self.log.start_round(r) if ctx.rank == 0 else self.log.prompts_done(r)
        round_rows = [x for x in self.log.round_rows(r) if x["prompt_id"] < done]
        if done:
            self.say(f"round {r}: {done} of {len(prompts)} prompts already sampled; continuing after them")
        per_call = max(1, self.section.generation_batch_size // self.n)
        seed0 = self.cfg.train.seed + 1_000_003 * r
        starts = list(range(done, len(prompts), per_call))
        self.prompts_by_rank = [0] * self._ranks()[1]
        reward_log = RewardLog(ctx.run.reward_logs) \
            if ctx.rank == 0 and self.cfg.monitor.reward_logs else None
        with shown.task(f"round {r}/{self.section.rounds} sampling", total=(len(prompts) - done) * self.n,
                        unit=f"samples ({len(prompts) - done} prompts x {self.n})") as bar:
            return self._sample_waves(r, model, prompts, columns, starts, per_call, seed0, round_rows, done,
                                      reward_log, bar)

    def _sample_waves(self, r, model, prompts, columns, starts, per_call, seed0, round_rows, done, reward_log,
                      bar) -> tuple[int, list[dict]]:
        """sample_round's generate calls, wave by wave; `bar` counts the rows gathered."""
        from rlft.rollout.split import gather, is_sharded, rank_calls

        ctx, (rank, world) = self.ctx, self._ranks()
        for k, keep in rank_calls(len(starts), rank, world, even=is_sharded(model)):  # one entry per wave
            part = None
            if k is not None:  # keep False: a repeated call (sharded model) keeping the ranks' generate calls in step
                part = self._sample_call(r, model, prompts, columns, starts[k], per_call, seed0, score=keep)
            for j, got in enumerate(gather(part, world)):
                if got is None:
                    continue
                rows, unscored, logs = got
                self.suite.record(len(rows), unscored)  # may stop the run: every rank counts the same calls
                if reward_log is not None:
                    reward_log.write(self.step, [{**x, "round": r} for x in logs])
                round_rows += rows
                bar.advance(len(rows))  # every rank's rows, once gathered: the round's whole count
                self.prompts_by_rank[j] += len(rows) // self.n
                if ctx.rank == 0:
                    self.log.append(rows)
            if any(gather(ctx.interrupt.requested(), world)):  # a signal on any rank stops them all here
                last = max(x["prompt_id"] for x in round_rows) + 1 if round_rows else done
                self.say(f"interrupted while sampling round {r} after prompt {last} of {len(prompts)}; "
                          f"samples so far are in {self.log.path}. Resume with: {ctx.resume_command}")
                return 130, []  # rlft's one "interrupted, resumable" code, as for an interrupt while training
        return 0, round_rows

    def _ranks(self) -> tuple[int, int]:
        """(rank, world size) the round's sampling is split over."""
        from rlft.rollout.split import process_group

        return process_group() if self.ctx.num_processes > 1 else (0, 1)

    def _sample_call(self, r: int, model, prompts: list, columns: dict, start: int, per_call: int, seed0: int,
                     score: bool = True):
        """One generate call over prompts start... and their scores: (rows, unscored count, what the rewards
        printed); None when `score` is False (drawn only to keep sharded ranks in step)."""
        from rlft.rollout import score as score_rollouts

        idx = list(range(start, min(start + per_call, len(prompts))))
        self.engine.sync(model)  # this round's policy reaches the engine (pushed once: later calls find it there)
        rollouts = self.engine.sample([prompts[i] for i in idx], self._params(seed0 + start), self.n, prompt_ids=idx)
        if not score:
            return None
        scores = score_rollouts(rollouts, self.suite, {k: [v[i] for i in idx] for k, v in columns.items()},
                                count=False)  # counted once the call's rows reach every rank
        rows = []
        for b in range(len(rollouts)):
            p = rollouts.prompt_index[b]
            rows.append({"round": r, "prompt_id": idx[p], "sample": b % self.n, "prompt": prompts[idx[p]],
                         "completion": rollouts.completions[b],
                         "rewards": {k: v[b] for k, v in scores.per_reward.items()}, "total": scores.total[b],
                         "finished": rollouts.finished[b] if rollouts.finished else None})
        return rows, sum(t is None for t in scores.total), self.suite.pop_logs()

    def log_completions(self, r: int, decided: list[dict], step: int) -> None:
        from rlft.data.messages import as_text
        from rlft.rollout import CompletionLog

        names = self.suite.names
        extra = {"round": [r] * len(decided)}
        if any("kept" in x for x in decided):
            extra["kept"] = [x.get("kept") for x in decided]
        CompletionLog(self.ctx.run.completions, self.cfg.monitor.log_completions).write(
            step, [x["prompt_id"] for x in decided], [as_text(x["prompt"]) for x in decided],
            [x["completion"] for x in decided], {k: [x["rewards"].get(k) for x in decided] for k in names},
            [x["total"] for x in decided],
            advantages=[x["advantage"] for x in decided] if any("advantage" in x for x in decided) else None,
            weights=[x["weight"] for x in decided] if any("weight" in x for x in decided) else None, extra=extra)


class SampledSFT(Stage):
    """One RS-SFT / AWR run: its parts of the run lifecycle (rlft.runtime.lifecycle runs them in order), resumed per
    round. `decide(rows, section, round) -> (decided rows, metrics)`; `trainer_class()` the SFTTrainer
    class, called when a round trains (so transformers loads after the process is set up, as it reads its settings)."""

    resume = PER_ROUND  # one checkpoint folder per round; rounds.json keeps eval.start and the rounds' steps

    def __init__(self, cfg: RlftConfig, composed: Composed, opts: RunOptions, decide: Callable,
                 trainer_class: Callable[[], type]):
        super().__init__(cfg, composed, opts)
        self.decide, self.trainer_class = decide, trainer_class

    def run(self) -> int:
        return run_stage(self)

    def inputs(self) -> StageInputs:
        """TRL's objections, rewards, tokenizer and checked prompt data, before the run folder exists (exit 2)."""
        from rlft.stages.common.prompt_data import sampling_inputs

        sft_trl_config(self.cfg, self.cfg.train.output_dir or ".", self.composed)
        inputs = sampling_inputs(self.cfg, self.composed)
        inputs.suite.capture_logs(self.cfg.monitor.reward_logs)  # what rewards print -> reward_logs.jsonl
        return inputs

    def trainer(self, ctx, model, inputs: StageInputs) -> "Rounds":
        return Rounds(self, ctx, model, inputs)

    def evaluator(self, ctx, rounds: "Rounds", inputs: StageInputs) -> Evaluation | None:
        return None if not inputs.eval_rows else RoundsEval(rounds, inputs.eval_rows)


class RoundsEval(Evaluation):
    """eval.start / eval.end of the rounds: fresh samples of the evaluation prompts (`Rounds.evaluate`)."""

    def __init__(self, rounds: "Rounds", rows: list[dict]):
        self.rounds = rounds
        self.prompts = [r["prompt"] for r in rows]
        self.columns = {c: [r[c] for r in rows] for c in rows[0] if c != "prompt"}

    def evaluate(self, model, step: int) -> dict:
        return self.rounds.evaluate(model, self.prompts, self.columns, step)

    def start_model(self, rounds):
        return rounds.model

    def end_model(self, rounds, code: int) -> tuple | None:
        return (rounds.model, rounds.steps) if code == 0 else None

    def started(self, result: dict) -> None:
        self.rounds.say(f"eval.start: mean reward {result['reward_mean']} over {result['n']} samples")

    def line(self, ctx) -> str | None:
        if "end" not in ctx.eval:
            return None
        return (f"eval.end: mean reward {ctx.eval['end']['reward_mean']} (start "
                f"{ctx.eval.get('start', {}).get('reward_mean')}) over {ctx.eval['end']['n']} samples")


class Rounds:
    """The rounds of one run (the trainer of a per-round stage): sample -> score -> decide -> SFT, from the first
    round not yet trained, its policy as that round starts it (trained rounds' adapter loaded on --resume)."""

    def __init__(self, stage: SampledSFT, ctx, model, inputs: StageInputs):
        cfg = self.cfg = stage.cfg
        self.composed, self.opts, self.decide, self.trainer_class = (stage.composed, stage.opts, stage.decide,
                                                                     stage.trainer_class)
        self.section = getattr(cfg, cfg.stage)
        self.rounds, self.n = self.section.rounds, self.section.num_samples_per_prompt
        self.ctx, self.tokenizer, self.dataset = ctx, inputs.tokenizer, inputs.train
        self.suite, self.eval_suite = inputs.suite, inputs.eval_suite
        self.suite.abort_when(ctx.interrupt.requested)  # Ctrl-C never waits on a hung reward
        if self.opts.resume and ctx.run.final.is_dir():
            raise RunError(f"nothing left to do: {ctx.run.root} holds a finished run (final/)")
        self.log = SamplesLog(ctx.run.samples, self.n)
        self.sampler = RoundSampler(cfg, self.tokenizer, self.suite, ctx, self.log, self.say)
        ctx.rounds  # noqa: B018 - rounds.json read now: a damaged one stops the run before anything samples
        self.first = next((r for r in range(1, self.rounds + 1) if not self.round_trained(r)), self.rounds + 1)
        self.model = model
        if self.first > 1:
            self.model = self._load_adapter(model, self.adapter_dir(self.first - 1))
            self.say(f"resuming at round {self.first} of {self.rounds} (rounds before it are trained)")
        self.steps = 0  # optimizer steps over all rounds

    # -- paths -----------------------------------------------------------------------------------
    def ckpt_dir(self, r: int) -> Path:
        return self.ctx.run.checkpoints if self.rounds == 1 else self.ctx.run.checkpoints / f"round-{r}"

    def adapter_dir(self, r: int) -> Path:
        return self.ckpt_dir(r) / "adapter"

    def round_trained(self, r: int) -> bool:
        if r == self.rounds:
            return self.ctx.run.final.is_dir()
        return (self.adapter_dir(r) / COMPLETE_MARKER).is_file()

    def say(self, text: str) -> None:
        if self.ctx.rank == 0:
            print(f"rlft: {text}", file=sys.stderr, flush=True)

    # -- the rounds ------------------------------------------------------------------------------
    def train_rounds(self, ctx) -> int:
        """The rounds: sample -> score -> decide -> SFT, from the first round not yet trained; the exit code."""
        dataset, first = self.dataset, self.first
        steps = self.steps = sum(v for k, v in ctx.rounds.get("round_steps", {}).items() if int(k) < first)
        ctx.steps = steps

        prompts = list(dataset["prompt"])
        columns = {c: list(dataset[c]) for c in dataset.column_names if c != "prompt"}
        for r in range(first, self.rounds + 1):
            if self.log.decided(r):
                decided = self.log.round_rows(r)
                metrics = self.decide(decided, self.section, r)[1]
                self.say(f"round {r}: {len(decided)} samples already scored; training without sampling again")
            else:
                self.sampler.step = steps
                code, rows = self.sampler.sample_round(r, self.model, prompts, columns)
                if code:
                    return code
                decided, metrics = self.decide(rows, self.section, r)
                # the most prompts one process sampled: all of them in one process, a share of them in several
                metrics["sampling/prompts_per_rank"] = max(self.sampler.prompts_by_rank)
                if ctx.rank == 0:
                    self.log.decide(r, decided)
                    self.sampler.log_completions(r, decided, steps)
            self.say(self._round_line(r, metrics))
            code, self.model, round_steps = self._train_round(r, self.model, decided, metrics, steps)
            steps = self.steps = steps + round_steps
            ctx.steps = steps
            if code:
                return code
            ctx.round_done(r, round_steps)
        return 0

    def _round_line(self, r: int, m: dict) -> str:
        keys = [k for k in ("sampled_reward_mean", "kept_count", "kept_fraction", "weight_mean", "ess", "frac_clipped")
                if m.get(k) is not None]
        line = f"round {r}/{self.rounds}: " + ", ".join(f"{k} {m[k]:.4g}" for k in keys)
        by_rank = self.sampler.prompts_by_rank
        if len(by_rank) > 1 and m.get("sampling/prompts_per_rank") is not None:
            line += f"; prompts sampled per process {'/'.join(map(str, by_rank))}"
        return line

    def evaluate(self, model, prompts: list, columns: dict, step: int | None = None) -> dict:
        """Mean total reward of fresh samples (not counted toward the reward-failure guard; `eval:` over the
        stage's defaults: num_samples_per_prompt samples at the rounds' settings), `generation_batch_size`
        completions per generate call as in the rounds; every rank calls it (each samples a share of the prompts).
        With a step, each prompt's first sample goes to completions.jsonl as an `eval-<i>` row."""
        from rlft.config.eval_sampling import EvalSettings, eval_sampling
        from rlft.rollout import evaluation
        from rlft.rollout.sampler import SamplerSettings

        s = self.section
        defaults = EvalSettings(n=self.n, max_new_tokens=s.max_tokens, temperature=s.temperature, top_p=s.top_p)
        return evaluation(self.tokenizer, self.suite, prompts, columns, eval_sampling(self.cfg, defaults),
                          self.cfg.train.seed, s.generation_batch_size, self.ctx.run.eval_completions,
                          self.eval_suite, SamplerSettings.from_config(self.cfg))(model, step)

    # -- training --------------------------------------------------------------------------------
    def _load_adapter(self, model, folder: Path):
        """The policy as a finished round left it: its adapter on the start model (or, without LoRA, its weights)."""
        from peft import PeftModel

        from rlft.models.weights import load_adapter, load_causal_lm, load_weights_into

        if not (folder / "adapter_config.json").is_file():  # full fine-tuning saved the whole model
            return load_causal_lm(str(folder), self.cfg)
        if isinstance(model, PeftModel):  # init_from continued an earlier adapter: same adapter, newer weights
            load_weights_into(model, folder)
            return model
        return load_adapter(model, folder, trainable=True)

    def _unsharded(self, sharded):
        """An FSDP-trained round's policy as a plain model on every rank (rebuilt, weights gathered)."""
        from peft import PeftModel, get_peft_model

        from rlft.models.loading import load_policy, lora_config
        from rlft.runtime.sharding import unsharded_copy

        fresh = load_policy(self.cfg)
        if self.cfg.lora.enabled and not isinstance(fresh, PeftModel):
            fresh = get_peft_model(fresh, lora_config(self.cfg, fresh))
        return unsharded_copy(sharded, fresh)

    def _train_round(self, r: int, model, decided: list[dict], metrics: dict, step_offset: int):
        """(exit code, the trained model, optimizer steps of the round)."""
        from datasets import Dataset
        from peft import PeftModel

        from rlft.models.loading import lora_config
        from rlft.runtime.final import save_whole_model
        from rlft.runtime.sharding import is_fsdp

        ctx = self.ctx
        trainer_cls = self.trainer_class()
        peft = None if isinstance(model, PeftModel) or not self.cfg.lora.enabled else lora_config(self.cfg, model)
        out = self.ckpt_dir(r)
        out.mkdir(parents=True, exist_ok=True)
        trainer = trainer_cls(model=model, args=sft_trl_config(self.cfg, str(out), self.composed),
                              train_dataset=Dataset.from_list(training_pairs(decided)), processing_class=self.tokenizer,
                              peft_config=peft, callbacks=[round_metrics_callback(metrics, step_offset),
                                                           *ctx.new_callbacks()])
        if ctx.resume_round(out, step_offset) is not None:
            self.say(f"round {r}: resuming training from {ctx.resume_from.name}")
        code = ctx.train(trainer, self.tokenizer, final=r == self.rounds)
        # the total is known only in the last round (each round's size follows from its samples)
        ctx.max_steps = step_offset + trainer.state.max_steps if r == self.rounds and trainer.state.max_steps else None
        model = trainer.accelerator.unwrap_model(trainer.model)
        if code == 0 and r < self.rounds and is_fsdp(trainer.accelerator):
            model = self._unsharded(model)  # the next round samples with whole weights and shards anew
        if code == 0 and r < self.rounds:
            folder = self.adapter_dir(r)
            save_whole_model(trainer, folder)  # every rank: under FSDP the weights are gathered from all of them
            if not trainer.args.should_save:
                return code, model, trainer.state.global_step
            (folder / COMPLETE_MARKER).write_text("ok\n")
            for ckpt in out.glob(run_files.CHECKPOINT_GLOB):  # the round is done: its adapter is all a resume needs
                shutil.rmtree(ckpt, ignore_errors=True)
        return code, model, trainer.state.global_step
