"""The run lifecycle (rlft.runtime.lifecycle): the order a stage's parts run in, eval.start / eval.end taken once
by the lifecycle, the resumed start kept, no eval.end after a failed or interrupted run, the exit code recorded."""

from types import SimpleNamespace

import pytest

from rlft.runtime import lifecycle
from rlft.runtime.lifecycle import CallEvaluator, Stage, run_stage


class FakeContext:
    """RunContext's surface the lifecycle uses, without a run folder."""

    def __init__(self, cfg, composed, opts, *, own_resume=False):
        self.own_resume, self.eval, self.exit_code, self.rank = own_resume, {}, None, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Recorder(Stage):
    def __init__(self, code=0, resumed=None, every=0):
        super().__init__(SimpleNamespace(), None, SimpleNamespace(verbose=False))
        self.code, self.resumed, self.every, self.calls = code, resumed, every, []
        self.trainer = SimpleNamespace(add_callback=lambda cb: self.calls.append(("callback", type(cb).__name__)))

    def check_inputs(self):
        self.calls.append("check_inputs")

    def build(self, ctx):
        self.ctx = ctx
        self.calls.append("build")

    def evaluator(self, ctx):
        return CallEvaluator(lambda model, step: self.calls.append(("evaluate", model, step)) or {
            "reward_mean": float(step), "n": 4}, self.every)

    def resumed_eval_start(self, ctx):
        return self.resumed

    def start_model(self):
        return "start-model"

    def train(self, ctx):
        self.calls.append("train")
        return self.code

    def end_model(self):
        return "end-model", 7


@pytest.fixture(autouse=True)
def fake_context(monkeypatch):
    monkeypatch.setattr(lifecycle, "RunContext", FakeContext)
    monkeypatch.setattr(lifecycle, "quiet_libraries", lambda verbose: None)


def test_a_finished_run_is_evaluated_at_the_start_and_the_end_in_order(capsys):
    stage = Recorder()
    assert run_stage(stage) == 0
    assert stage.calls == ["check_inputs", "build", ("evaluate", "start-model", 0), "train",
                           ("evaluate", "end-model", 7)]
    assert "rlft: eval: mean reward 0.0 at the start, 7.0 at the end (4 fresh samples)" in capsys.readouterr().err


def test_a_failed_or_interrupted_run_has_no_end_eval_and_keeps_its_code():
    stage = Recorder(code=130)
    assert run_stage(stage) == 130
    assert ("evaluate", "end-model", 7) not in stage.calls
    assert stage.ctx.exit_code == 130 and list(stage.ctx.eval) == ["start"]  # summary.json's code and numbers


def test_a_resumed_start_is_not_measured_again():
    stage = Recorder(resumed={"reward_mean": 0.5, "n": 4})
    run_stage(stage)
    assert [c for c in stage.calls if c[0] == "evaluate"] == [("evaluate", "end-model", 7)]


def test_a_periodic_evaluation_becomes_a_callback():
    stage = Recorder(every=5)
    run_stage(stage)
    assert ("callback", "PeriodicEval") in stage.calls


def test_a_stage_without_an_evaluator_trains_without_one(capsys):
    class Plain(Recorder):
        def evaluator(self, ctx):
            return None

    stage = Plain()
    assert run_stage(stage) == 0
    assert stage.calls == ["check_inputs", "build", "train"] and capsys.readouterr().err == ""


def test_a_stage_may_keep_its_own_rule_for_the_end_eval(capsys):
    """The PPO loop's rule: eval.end after its last update even when interrupted during it, never when stopped
    early; the eval line and eval_ended stay a finished run's."""
    class LoopRule(Recorder):
        def __init__(self, code, ran_to_end):
            super().__init__(code=code)
            self.ran_to_end = ran_to_end

        def evaluates_end(self, ctx, code):
            return self.ran_to_end

    interrupted_at_the_end = LoopRule(130, True)
    assert run_stage(interrupted_at_the_end) == 130
    assert interrupted_at_the_end.calls[-1] == ("evaluate", "end-model", 7)
    assert list(interrupted_at_the_end.ctx.eval) == ["start", "end"] and capsys.readouterr().err == ""
    stopped_early = LoopRule(0, False)
    assert run_stage(stopped_early) == 0
    assert stopped_early.calls[-1] == "train" and list(stopped_early.ctx.eval) == ["start"]
