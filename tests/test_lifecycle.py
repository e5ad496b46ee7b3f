"""The run lifecycle (rlft.runtime.lifecycle): the fixed order a stage's declared parts run in (inputs -> model ->
run folder -> callbacks -> trainer -> eval.start -> train -> eval.end), eval.start / eval.end taken once by the
lifecycle, the resumed start kept, no eval.end after a failed or interrupted run, the exit code recorded, no run
folder when the model fails to load, and a per-round stage's trainer running its rounds."""

from types import SimpleNamespace

import pytest

from rlft.errors import RunError
from rlft.runtime import lifecycle
from rlft.runtime.lifecycle import PER_ROUND, CallEvaluator, Evaluation, Stage, StageInputs, run_stage

CALLS: list = []


class FakeContext:
    """RunContext's surface the lifecycle uses, without a run folder."""

    def __init__(self, cfg, composed, opts, *, resume):
        self.resume, self.eval, self.exit_code, self.rank, self.kept = resume, {}, None, 0, cfg.kept
        self.code = cfg.code

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def open_run(self):
        CALLS.append("open_run")

    def new_callbacks(self):
        CALLS.append("callbacks")
        self.callbacks = ["rlft callbacks"]

    def train(self, trainer, tokenizer):
        CALLS.append(("train", tokenizer))
        return self.code

    def kept_eval_start(self):
        return self.kept

    def keep_eval_start(self, result):
        CALLS.append(("keep", result["reward_mean"]))


class Recorder(Stage):
    def __init__(self, code=0, kept=None, every=0, evaluation=True):
        super().__init__(SimpleNamespace(code=code, kept=kept), None, SimpleNamespace(verbose=False))
        self.every, self.evaluation = every, evaluation
        CALLS.clear()
        self.calls = CALLS

    def inputs(self):
        self.calls.append("inputs")
        return StageInputs(tokenizer="tok")

    def model(self, inputs):
        self.calls.append("model")
        return "start-model"

    def trainer(self, ctx, model, inputs):
        self.ctx = ctx
        self.calls.append(("trainer", model, ctx.callbacks))
        return SimpleNamespace(model=model, add_callback=lambda cb: self.calls.append(("callback", type(cb).__name__)),
                               accelerator=SimpleNamespace(unwrap_model=lambda m: "end-model"),
                               state=SimpleNamespace(global_step=7))

    def evaluator(self, ctx, trainer, inputs):
        if not self.evaluation:
            return None
        return CallEvaluator(lambda model, step: self.calls.append(("evaluate", model, step)) or {
            "reward_mean": float(step), "n": 4}, self.every)


@pytest.fixture(autouse=True)
def fake_context(monkeypatch):
    monkeypatch.setattr(lifecycle, "RunContext", FakeContext)
    monkeypatch.setattr(lifecycle, "quiet_libraries", lambda verbose: None)


def test_a_finished_run_runs_its_parts_in_the_fixed_order(capsys):
    stage = Recorder()
    assert run_stage(stage) == 0
    assert stage.calls == ["inputs", "model", "open_run", "callbacks", ("trainer", "start-model", ["rlft callbacks"]),
                           ("evaluate", "start-model", 0), ("keep", 0.0), ("train", "tok"),
                           ("evaluate", "end-model", 7)]
    assert "rlft: eval: mean reward 0.0 at the start, 7.0 at the end (4 fresh samples)" in capsys.readouterr().err


def test_a_model_that_fails_to_load_opens_no_run_folder():
    class Broken(Recorder):
        def model(self, inputs):
            raise RunError("model.name_or_path: cannot load `x`")

    stage = Broken()
    with pytest.raises(RunError):
        run_stage(stage)
    assert stage.calls == ["inputs"]


def test_a_failed_or_interrupted_run_has_no_end_eval_and_keeps_its_code():
    stage = Recorder(code=130)
    assert run_stage(stage) == 130
    assert ("evaluate", "end-model", 7) not in stage.calls
    assert stage.ctx.exit_code == 130 and list(stage.ctx.eval) == ["start"]  # summary.json's code and numbers


def test_a_resumed_start_is_not_measured_again():
    stage = Recorder(kept={"reward_mean": 0.5, "n": 4})
    run_stage(stage)
    assert [c for c in stage.calls if c[0] == "evaluate"] == [("evaluate", "end-model", 7)]
    assert stage.ctx.eval["start"] == {"reward_mean": 0.5, "n": 4}


def test_a_periodic_evaluation_becomes_a_callback():
    stage = Recorder(every=5)
    run_stage(stage)
    assert ("callback", "PeriodicEval") in stage.calls


def test_a_stage_without_an_evaluator_trains_without_one(capsys):
    stage = Recorder(evaluation=False)
    assert run_stage(stage) == 0
    assert stage.calls[-1] == ("train", "tok") and not any(c[0] == "evaluate" for c in stage.calls)
    assert capsys.readouterr().err == ""


def test_an_evaluation_may_keep_its_own_rule_for_the_end_eval(capsys):
    """The PPO loop's rule: eval.end after its last update even when interrupted during it, never when stopped
    early; the eval line and `ended` stay a finished run's."""
    class LoopRule(Evaluation):
        def __init__(self, ran_to_end):
            self.ran_to_end, self.ended_calls = ran_to_end, 0

        def evaluate(self, model, step):
            CALLS.append(("evaluate", model, step))
            return {"reward_mean": 1.0, "n": 4}

        def end_model(self, trainer, code):
            return ("policy", 7) if self.ran_to_end else None

        def ended(self, ctx, trainer):
            self.ended_calls += 1

    class Loop(Recorder):
        def __init__(self, code, ran_to_end):
            super().__init__(code=code)
            self.rule = LoopRule(ran_to_end)

        def evaluator(self, ctx, trainer, inputs):
            return self.rule

    interrupted_at_the_end = Loop(130, True)
    assert run_stage(interrupted_at_the_end) == 130
    assert interrupted_at_the_end.calls[-1] == ("evaluate", "policy", 7)
    assert interrupted_at_the_end.rule.ended_calls == 0
    assert list(interrupted_at_the_end.ctx.eval) == ["start", "end"] and capsys.readouterr().err == ""
    stopped_early = Loop(0, False)
    assert run_stage(stopped_early) == 0
    assert stopped_early.calls[-1] == ("train", "tok") and list(stopped_early.ctx.eval) == ["start"]
    assert stopped_early.rule.ended_calls == 1


def test_a_per_round_stage_trains_through_its_rounds():
    class Rounds(Recorder):
        resume = PER_ROUND

        def trainer(self, ctx, model, inputs):
            self.ctx = ctx
            return SimpleNamespace(train_rounds=lambda c: self.calls.append(("rounds", c.resume)) or 0)

    stage = Rounds(evaluation=False)
    assert run_stage(stage) == 0
    assert stage.calls[-1] == ("rounds", PER_ROUND) and ("train", "tok") not in stage.calls


def test_the_run_folder_opens_only_as_a_step():
    """`ctx.run` before `open_run` is an error, not a folder created on first touch."""
    from rlft.runtime.context import RunContext

    ctx = RunContext.__new__(RunContext)
    ctx._run = None
    with pytest.raises(RuntimeError, match="not open yet"):
        ctx.run


def test_the_stage_protocol_stays_small():
    """At most six declared parts (here four methods and the resume policy), and no built-in stage overrides more
    than four of them (counting what its shared base overrides, and the resume policy it declares)."""
    import importlib

    parts = {"resume", "inputs", "model", "trainer", "evaluator"}
    assert {k for k in vars(Stage) if not k.startswith("_")} == parts
    for module, name in [("rlft.stages.grpo.runner", "GRPOStage"), ("rlft.stages.grpo.episodes", "EpisodeGRPOStage"),
                         ("rlft.stages.ppo.runner", "PPOStage"), ("rlft.stages.common.preference", "PreferenceStage"),
                         ("rlft.stages.rm.runner", "RMStage"), ("rlft.stages.common.sampled_sft", "SampledSFT"),
                         ("rlft.stages.common.plain_stage", "PlainStage")]:
        cls = getattr(importlib.import_module(module), name)
        overridden = {p for p in parts for k in cls.__mro__[:-2] if p in vars(k)}
        assert len(overridden) <= 4, (name, overridden)
