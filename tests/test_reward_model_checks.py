"""The `reward_model` reward's config checks (validate-config, no torch) and the pipeline's references to an earlier
stage's model (`${stages.<name>.final}`)."""

import json

import pytest

from conftest import run_cli
from rlft.config import ConfigError
from rlft.pipeline.spec import check_pipeline, load_pipeline
from rlft.rewards.reward_model import check_kwargs


def write_model(folder, arch="Qwen2ForSequenceClassification", **extra):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"architectures": [arch], **extra}))
    return folder


def config_file(tmp_path, kwargs):
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"model": {"name_or_path": "tiny"}, "data": {"train": "demo"},
                                "rewards": [{"fn": "reward_model", "kwargs": kwargs}]}))
    return path


def test_a_sequence_classifier_folder_passes(tmp_path):
    rm = write_model(tmp_path / "rm")
    assert check_kwargs({"path": str(rm), "batch_size": 8, "normalize": "fixed", "mean": 1.0, "std": 2.0}) == []
    assert check_kwargs({"path": "org/some-rm"}) == []  # a hub id: checked when the run loads it


@pytest.mark.parametrize("kwargs, key, words", [
    ({}, "path", "needs kwargs.path"),
    ({"path": "runs/nowhere/final"}, "path", "folder not found"),
    ({"path": "RM", "batch_size": 0}, "batch_size", ">= 1"),
    ({"path": "RM", "normalize": "zscore"}, "normalize", "none, running, fixed"),
    ({"path": "RM", "normalize": "fixed", "std": 0}, "std", "above 0"),
    ({"path": "RM", "device": "tpu"}, "device", "cpu, cuda"),
    ({"path": "RM", "pth": "x"}, "pth", "unknown reward_model option"),
])
def test_bad_kwargs_name_the_key(tmp_path, kwargs, key, words):
    rm = write_model(tmp_path / "rm")
    kwargs = {k: (str(rm) if v == "RM" else v) for k, v in kwargs.items()}
    problems = dict(check_kwargs(kwargs))
    assert key in problems and words in problems[key], problems


def test_a_causal_lm_or_an_adapter_is_no_reward_model(tmp_path):
    lm = write_model(tmp_path / "lm", arch="Qwen2ForCausalLM")
    assert "not a sequence-classification model" in dict(check_kwargs({"path": str(lm)}))["path"]
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    assert "PEFT adapter" in dict(check_kwargs({"path": str(adapter)}))["path"]


def test_validate_config_refuses_a_bad_path_in_one_line(tmp_path):
    res = run_cli("validate-config", "--stage", "grpo", "--hw", "cpu", "-c",
                  config_file(tmp_path, {"path": str(tmp_path / "missing" / "final")}))
    assert res.returncode == 2
    line = next(ln for ln in res.stderr.splitlines() if "rewards[0].kwargs.path" in ln)
    assert "c.yaml" in line and "reward model folder not found" in line
    assert "Traceback" not in res.stderr
    good = write_model(tmp_path / "rm")
    assert run_cli("validate-config", "--stage", "grpo", "--hw", "cpu", "-c",
                   config_file(tmp_path, {"path": str(good)})).returncode == 0


def pipeline(tmp_path, path_value, first="rm"):
    p = tmp_path / "p.yaml"
    p.write_text(json.dumps({
        "output_dir": str(tmp_path / "runs"), "defaults": {"model": {"name_or_path": "tiny"}},
        "stages": [{"stage": first, "data": {"train": "x.jsonl"}},
                   {"stage": "grpo", "data": {"train": "demo"},
                    "rewards": [{"fn": "reward_model", "kwargs": {"path": path_value}}]}]}))
    (tmp_path / "x.jsonl").write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n")
    return p


def test_a_pipeline_names_an_earlier_stages_model(tmp_path):
    pipe = load_pipeline(pipeline(tmp_path, "${stages.rm.final}"))
    checked = check_pipeline(pipe, [], "cpu")  # stage 1 has not run: its final/ is checked once it exists
    grpo_cfg = checked[1][1]
    assert grpo_cfg.rewards[0].kwargs["path"] == str(tmp_path / "runs" / "01-rm" / "final")
    assert grpo_cfg.model.init_from is None  # the rm stage's reward model is no policy to start from
    # once stage 1 has finished, its final/ is checked like any folder: a causal LM there is refused
    write_model(tmp_path / "runs" / "01-rm" / "final", arch="Qwen2ForCausalLM")
    with pytest.raises(ConfigError, match="not a sequence-classification model"):
        check_pipeline(pipe, [], "cpu")


@pytest.mark.parametrize("ref, words", [("${stages.judge.final}", "names no stage"),
                                        ("${stages.grpo.final}", "runs as this one"),
                                        ("${stages.2.final}", "runs as this one")])
def test_a_reference_to_no_earlier_stage_is_refused(tmp_path, ref, words):
    with pytest.raises(ConfigError) as exc:
        load_pipeline(pipeline(tmp_path, ref))
    assert words in str(exc.value) and "stage 2" in str(exc.value)


def test_plan_counts_the_reward_models_weights(tmp_path):
    from rlft.plan.model_shape import tiny_config

    config, _ = tiny_config(0.15)
    rm = write_model(tmp_path / "rm", **{k: v for k, v in config.items() if k != "architectures"})
    res = run_cli("plan", "--stage", "grpo", "--hw", "cpu", "-c", config_file(tmp_path, {"path": str(rm)}))
    assert res.returncode == 0, res.stderr[-2000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("reward_model"))
    assert "always" in line and "params x 4 B" in line and str(rm) in line


def test_running_normalization_uses_every_score_seen_so_far():
    import threading

    from rlft.rewards.reward_model import _Scorer

    scorer = _Scorer.__new__(_Scorer)  # the statistics only: no model behind it
    scorer.count, scorer.mean, scorer.m2, scorer.lock = 0, 0.0, 0.0, threading.Lock()
    assert scorer.running([1.0, 3.0]) == pytest.approx([-1.0, 1.0])  # mean 2, std 1
    assert scorer.running([2.0]) == pytest.approx([0.0])  # mean of 1, 3, 2 is 2
    assert scorer.count == 3 and scorer.mean == pytest.approx(2.0)
