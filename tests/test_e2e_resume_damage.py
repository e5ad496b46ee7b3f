"""--resume on the tiny model with damaged checkpoint state and with resumes that fail before a step:
a checkpoint whose rlft_state.json, trainer_state.json or RNG state does not load is moved aside with a
one-line warning and the one before it is used, as for truncated weights; a resume that fails before it
trains a step leaves summary.json, metrics and completions byte for byte as they were."""

import json
import shutil

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"
KEEP = ["train.save_steps=1", "train.save_total_limit=10"]
LOGS = ("summary.json", "metrics.jsonl", "completions.jsonl", "reward_logs.jsonl", "health.jsonl", "config.yaml")


def _train(out, *extra):
    return run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *KEEP, *extra)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 6-step run with a checkpoint at every step, copied by each test."""
    out = tmp_path_factory.mktemp("finished") / "run"
    res = _train(out, "train.max_steps=6")
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def _copy(finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def _ckpt(out, step):
    return out / "checkpoints" / f"checkpoint-{step}"


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _snapshot(out):
    return {name: (out / name).read_bytes() for name in LOGS if (out / name).exists()}


def _falls_back(out, warnings, to_step, max_steps=7):
    """Resume; each damaged checkpoint gets its warning and is moved aside; training goes on from `to_step`."""
    res = _train(out, f"train.max_steps={max_steps}", "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    for step, problem in warnings:
        assert f"WARNING checkpoint-{step} is damaged ({problem}" in res.stderr, (problem, res.stderr[-3000:])
        assert (out / "checkpoints" / f"damaged-checkpoint-{step}").is_dir()
    assert f"from step {to_step} to step {max_steps}" in res.stderr
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == list(range(1, max_steps + 1))
    assert sorted(r["step"] for r in read_jsonl(out / "reward_logs.jsonl")) == list(range(1, max_steps + 1))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == max_steps
    return res


def test_damaged_rlft_state_falls_back_checkpoint_by_checkpoint(finished, tmp_path):
    out = _copy(finished, tmp_path)
    (_ckpt(out, 6) / "rlft_state.json").write_text("{}")                     # found when the trainer loads it
    (_ckpt(out, 5) / "rlft_state.json").write_text('{"kl_controller": {"val')
    (_ckpt(out, 4) / "rlft_state.json").write_text("[1, 2]")
    (_ckpt(out, 3) / "rlft_state.json").write_text('{"kl_controller": "0.0", "last_kl": null, "trainer": {}}')
    _edit_json(_ckpt(out, 2) / "rlft_state.json", last_kl="high")             # refused by the GRPO trainer
    _falls_back(out, [(6, "rlft_state.json lacks kl_controller, last_kl, trainer"),
                      (5, "rlft_state.json is not valid JSON"),
                      (4, "rlft_state.json holds a list, not an object"),
                      (3, "rlft_state.json: kl_controller is a string, not an object"),
                      (2, "rlft_state.json does not load (ValueError: last_kl is 'high', not a number")], to_step=1)


def test_damaged_trainer_state_and_rng_fall_back_checkpoint_by_checkpoint(finished, tmp_path):
    out = _copy(finished, tmp_path)
    (_ckpt(out, 6) / "trainer_state.json").write_text("[6]")
    (_ckpt(out, 5) / "trainer_state.json").write_text('"step 5"')
    _edit_json(_ckpt(out, 4) / "trainer_state.json", global_step="4")
    (_ckpt(out, 3) / "rng_state.pth").write_bytes(b"\x80\x04garbage" * 8)
    rng = _ckpt(out, 2) / "rng_state.pth"
    rng.write_bytes(rng.read_bytes()[:300])                                    # truncated: caught as before
    _falls_back(out, [(6, "trainer_state.json holds a list, not an object"),
                      (5, "trainer_state.json holds a string, not an object"),
                      (4, "trainer_state.json: global_step is a string '4', not int"),
                      (3, "rng_state.pth is not a torch.save archive"),
                      (2, "rng_state.pth is truncated")], to_step=1)


def test_resume_that_fails_before_a_step_leaves_the_run_files_as_they_were(finished, tmp_path):
    import torch

    cases = {
        # rlft's header kept, the body damaged (a config.yaml without the header is not taken as rlft's: test_folders)
        "damaged config.yaml": (lambda out: (out / "config.yaml").write_text(
            "# rlft resolved config; each key notes the layer that set it\nstage: [grpo\n  model: {"),
            ["train.max_steps=7"], "config.yaml is not readable YAML"),
        "changed config": (lambda out: None, ["train.max_steps=7", "train.learning_rate=1e-3"], "1 setting(s) changed"),
        "nothing left": (lambda out: None, ["train.max_steps=6"], "nothing left to do"),
        # every checkpoint found damaged only when the trainer loads its state: nothing was trained
        "every checkpoint damaged": (
            lambda out: [(_ckpt(out, s) / "rlft_state.json").write_text("{}") for s in range(1, 7)],
            ["train.max_steps=8"], "holds a finished run (final/) and no checkpoint to continue from"),
    }
    for name, (damage, extra, said) in cases.items():
        out = tmp_path / name.replace(" ", "-")
        shutil.copytree(finished, out)
        damage(out)
        before = _snapshot(out)
        res = _train(out, *extra, "--resume")
        assert res.returncode == 2, (name, res.stderr[-3000:])
        assert said in res.stderr and "Traceback" not in res.stderr, (name, res.stderr[-3000:])
        assert _snapshot(out) == before, name  # summary.json still says finished at step 6, logs untouched
    # a resume that fails while loading (an optimizer state of another shape: it loads, but not into this
    # model) from an earlier checkpoint: the rows of the steps after it are still there, the summary too
    out = _copy(finished, tmp_path)
    for gone in ("checkpoints/checkpoint-6", "checkpoints/checkpoint-5", "final"):
        shutil.rmtree(out / gone)
    torch.save(torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))]).state_dict(), _ckpt(out, 4) / "optimizer.pt")
    before = _snapshot(out)
    res = _train(out, "train.max_steps=6", "--resume")
    assert res.returncode != 0 and "from step 4 to step 6" in res.stderr, res.stderr[-3000:]
    assert _snapshot(out) == before


def _rs_sft_args(out, rounds: int, eval_prompts: int) -> list[str]:
    """A short RS-SFT demo run: 8 prompts, one epoch a round."""
    return ["train", "--stage", "rs_sft", "--hw", "cpu", "-c", "configs/examples/rs_sft_demo.yaml",
            f"train.output_dir={out}", "data.max_samples=8", f"data.eval_prompts={eval_prompts}",
            "train.num_train_epochs=1", "train.per_device_train_batch_size=8", f"rs_sft.rounds={rounds}"]


def test_rs_sft_resume_of_a_finished_run_keeps_its_summary(tmp_path):
    out = tmp_path / "run"
    args = _rs_sft_args(out, rounds=1, eval_prompts=4)
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr[-3000:]
    before = _snapshot(out)
    res = run_cli(*args, "--resume")
    assert res.returncode == 2 and "nothing left to do" in res.stderr, res.stderr[-3000:]
    assert _snapshot(out) == before  # still "finished", not "failed at step 0"


def test_rs_sft_resume_with_damaged_rounds_json_is_one_line(tmp_path):
    """rounds.json holds the finished rounds' optimizer steps: damaged, a resume says so in one line (exit 2) and
    trains nothing, instead of a traceback (the other kinds of damage: tests/test_samples_log.py)."""
    damage = '{"round_steps": {"1": "three"}}'  # valid JSON, wrong content: the case a parse check alone misses
    out = tmp_path / "run"
    args = _rs_sft_args(out, rounds=2, eval_prompts=0)
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr[-3000:]
    shutil.rmtree(out / "final")  # as if killed while training round 2
    (out / "rounds.json").write_text(damage)
    res = run_cli(*args, "--resume")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "rounds.json" in errors[0] and "--overwrite" in errors[0], res.stderr[-2000:]
    assert not (out / "final").exists()


def _optimizer_of_other_shapes(path):
    """optimizer.pt as a LoRA rank change would leave it: the same groups and counts, the first state's tensors of
    another shape (torch loads it; the first optimizer step would fail)."""
    import torch

    state = torch.load(path, weights_only=True)
    first = state["param_groups"][0]["params"][0]
    state["state"][first] = {k: (torch.zeros(*v.shape[:-1], v.shape[-1] + 1) if v.dim() else v)
                             for k, v in state["state"][first].items()}
    torch.save(state, path)


def test_resume_with_an_optimizer_state_that_does_not_fit_is_one_line(finished, tmp_path):
    """An optimizer state that loads but does not fit the model (other shapes, other counts) is refused in one
    line naming the file and what differs, exit 2, before a step is trained: the run's files stay as they were."""
    import torch

    cases = {
        "other shapes": (_optimizer_of_other_shapes, "has shape"),
        "other counts": (lambda path: torch.save(torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))]).state_dict(),
                                                 path), "it holds 1 group(s) of 1 parameter(s); this model trains 2"),
    }
    for name, (damage, said) in cases.items():
        out = tmp_path / name.replace(" ", "-")
        shutil.copytree(finished, out)
        for gone in ("checkpoints/checkpoint-6", "checkpoints/checkpoint-5", "final"):
            shutil.rmtree(out / gone)
        damage(_ckpt(out, 4) / "optimizer.pt")
        before = _snapshot(out)
        res = _train(out, "train.max_steps=6", "--resume")
        assert res.returncode == 2 and "Traceback" not in res.stderr, (name, res.stderr[-3000:])
        errors = [line for line in res.stderr.splitlines() if line.startswith("error")]
        assert len(errors) == 1, (name, res.stderr[-3000:])
        assert "checkpoint-4/optimizer.pt does not fit this model" in errors[0] and said in errors[0], errors[0]
        assert "--overwrite" in errors[0] and "settings the run was trained with" in errors[0]
        assert _snapshot(out) == before, name
        assert (_ckpt(out, 4)).is_dir()  # not moved aside: a setting changed, the checkpoint is whole
