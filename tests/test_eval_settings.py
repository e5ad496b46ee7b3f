"""The shared evaluation: the `eval:` section's rules, how it overrides a stage's defaults, mean@n / pass@n / the
spread over prompts on hand-made scores, the eval metrics row, and the preference stages' answer budget."""

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from conftest import ROOT, run_cli
from rlft.cli import app
from rlft.config.eval_sampling import EVAL_SEED_OFFSET, EvalSettings, describe, eval_sampling
from rlft.monitor.metrics import eval_row
from rlft.rollout.eval_stats import prompt_stats

EXAMPLES = ROOT / "configs" / "examples"


# --- mean@n, pass@n, spread over prompts ------------------------------------------------------------------

def test_mean_pass_and_spread_over_hand_made_groups():
    # three prompts, two samples each: [1.0, 0.0], [0.5, 0.5], [no score, 0.2]
    stats = prompt_stats([1.0, 0.0, 0.5, 0.5, None, 0.2], 2, pass_threshold=1.0)
    assert stats["reward_mean"] == pytest.approx((1.0 + 0.0 + 0.5 + 0.5 + 0.2) / 5)  # mean@2 over scored samples
    assert stats["pass_at_k"] == pytest.approx(1 / 3)  # only the first prompt has a sample reaching 1.0
    assert stats["prompt_std"] == pytest.approx(0.141421, abs=1e-6)  # pstdev of the prompt means 0.5, 0.5, 0.2
    assert stats["k"] == 2


def test_pass_threshold_counts_a_prompt_once_and_unscored_prompts_fail():
    totals = [0.3, 0.8, 0.9, 0.9, None, None]
    assert prompt_stats(totals, 2, pass_threshold=0.8)["pass_at_k"] == pytest.approx(2 / 3)
    assert prompt_stats(totals, 2, pass_threshold=0.95)["pass_at_k"] == 0.0
    assert prompt_stats(totals, 2, pass_threshold=0.8)["prompt_std"] == pytest.approx(0.175)  # means 0.55 and 0.9


def test_one_sample_per_prompt_gives_pass_at_1_as_the_share_that_passes():
    stats = prompt_stats([1.0, 0.0, 1.0, 0.5], 1, pass_threshold=1.0)
    assert (stats["reward_mean"], stats["pass_at_k"], stats["k"]) == (0.625, 0.5, 1)


def test_totals_that_are_not_whole_groups_are_refused():
    with pytest.raises(ValueError, match="whole groups"):
        prompt_stats([1.0, 0.0, 1.0], 2, pass_threshold=1.0)


def test_the_eval_row_carries_pass_at_k_and_the_spread():
    row = eval_row({"reward_mean": 0.5, "pass_at_k": 0.25, "prompt_std": 0.1, "per_reward": {"r": 0.5}})
    assert row == {"eval_reward": 0.5, "eval_pass_at_k": 0.25, "eval_prompt_std": 0.1, "eval_rewards/r": 0.5}


# --- eval: over the stage's defaults -----------------------------------------------------------------------

def cfg(**eval_keys):
    keys = {"samples_per_prompt": None, "greedy": False, "max_new_tokens": None, "temperature": None, "top_p": None,
            "pass_threshold": 1.0, "batch_size": None, "rewards": [], **eval_keys}
    return SimpleNamespace(eval=SimpleNamespace(**keys), data=SimpleNamespace(chat_template="auto"))


STAGE = EvalSettings(n=8, max_new_tokens=24, temperature=0.7, top_p=0.9)


def test_null_keys_keep_the_stage_defaults():
    assert eval_sampling(cfg(), STAGE) == STAGE


def test_set_keys_replace_the_stage_defaults():
    got = eval_sampling(cfg(samples_per_prompt=4, max_new_tokens=64, temperature=1.0, top_p=1.0,
                            pass_threshold=0.5), STAGE)
    assert (got.n, got.max_new_tokens, got.temperature, got.top_p, got.pass_threshold) == (4, 64, 1.0, 1.0, 0.5)
    assert got.seed_offset == EVAL_SEED_OFFSET


def test_greedy_draws_one_sample():
    got = eval_sampling(cfg(greedy=True), STAGE)
    assert (got.n, got.greedy) == (1, True)


def test_the_digest_covers_the_sampling_settings_but_not_the_batch_size():
    from rlft.rollout.evaluate import eval_set

    prompts, names = ["a", "b"], ["r"]
    base = EvalSettings(4, 64, 1.0)
    digest = eval_set(prompts, names, base.as_dict())
    assert eval_set(prompts, names, EvalSettings(4, 64, 1.0, batch_size=32).as_dict()) == digest
    for other in (EvalSettings(8, 64, 1.0), EvalSettings(4, 32, 1.0), EvalSettings(4, 64, 0.7),
                  EvalSettings(1, 64, 1.0, greedy=True), EvalSettings(4, 64, 1.0, chat_template="never"),
                  EvalSettings(4, 64, 1.0, seed_offset=1), EvalSettings(4, 64, 1.0, pass_threshold=0.5)):
        assert eval_set(prompts, names, other.as_dict()) != digest, other
    assert eval_set(prompts, ["r", "extra"], base.as_dict()) != digest  # eval-only rewards count too


def test_settings_in_words():
    assert describe(EvalSettings(4, 64, 1.0).as_dict()) == "4 samples of ≤64 tokens at T=1.0"
    assert describe(EvalSettings(1, 24, 0.7, greedy=True).as_dict()) == "1 sample of ≤24 tokens greedy"
    assert describe(STAGE.as_dict()) == "8 samples of ≤24 tokens at T=0.7, top_p=0.9"


# --- validate-config ---------------------------------------------------------------------------------------

def validate(*args):
    return CliRunner().invoke(app, ["validate-config", "--stage", "grpo", "--hw", "cpu", *args])


@pytest.mark.parametrize("override,key,words", [
    ("eval.samples_per_prompt=0", "eval.samples_per_prompt", "between 1 and 1024"),
    ("eval.temperature=0", "eval.temperature", "> 0 and <= 5"),
    ("eval.top_p=1.5", "eval.top_p", "> 0 and <= 1"),
    ("eval.max_new_tokens=0", "eval.max_new_tokens", ">= 1"),
    ("eval.greedy=maybe", "eval.greedy", "true or false"),
    ("eval.rewards=[{fn: no_such_reward}]", "eval.rewards[0].fn", "no_such_reward"),
])
def test_a_bad_eval_value_names_the_key_and_what_it_allows(override, key, words):
    res = validate(override)
    assert res.exit_code == 2, res.output
    assert f"error: {key} (command line)" in res.stderr and words in res.stderr, res.stderr
    assert "Traceback" not in res.output


def test_greedy_with_several_samples_is_refused():
    res = validate("eval.greedy=true", "eval.samples_per_prompt=4")
    assert res.exit_code == 2 and "error: eval.samples_per_prompt" in res.stderr and "greedy" in res.stderr
    assert validate("eval.greedy=true", "eval.samples_per_prompt=1").exit_code == 0


def test_a_whole_eval_section_validates():
    res = validate("eval.samples_per_prompt=4", "eval.max_new_tokens=32", "eval.temperature=0.7",
                   "eval.rewards=[{fn: char_fraction, name: letter}]")
    assert res.exit_code == 0, res.output


# --- preference stages: the answer budget comes from eval.max_new_tokens --------------------------------------

def preference_cfg(eval_tokens, stage_tokens=None):
    base = cfg(max_new_tokens=eval_tokens)
    base.stage = "orpo"
    base.orpo = SimpleNamespace(eval_max_new_tokens=stage_tokens, max_length=64, max_prompt_length=63)
    base.train = SimpleNamespace(max_seq_length=512)
    return base


def test_the_preference_budget_is_eval_max_new_tokens_when_set():
    from rlft.config.preference_lengths import eval_budget

    assert eval_budget(preference_cfg(7, stage_tokens=20), 40, "measured") == (7, "eval.max_new_tokens")
    assert eval_budget(preference_cfg(None, stage_tokens=20), 40, "measured")[0] == 20
    # null: the longest chosen answer, never max_length - max_prompt_length (1 token here)
    assert eval_budget(preference_cfg(None), 40, "measured")[0] == 40


def test_a_preference_eval_samples_with_eval_max_new_tokens():
    from rlft.rollout.evaluate import sampling_params
    from rlft.stages.common.preference_eval import SAMPLES_PER_PROMPT, PreferenceEval

    c = preference_cfg(5)
    pe = PreferenceEval(c, suite=None, source=None)
    pe.max_new_tokens = pe.answer_budget(tokenizer=None, source=None)  # set: nothing measured
    settings = eval_sampling(c, pe.eval_defaults())
    assert (settings.n, settings.max_new_tokens) == (SAMPLES_PER_PROMPT, 5)
    assert sampling_params(settings, 42, None).max_new_tokens == 5


@pytest.mark.e2e
def test_a_dpo_run_samples_its_eval_with_the_eval_section(tmp_path):
    out = tmp_path / "run"
    data = EXAMPLES / "data" / "preference_demo.jsonl"
    res = run_cli("train", "--stage", "dpo", "--hw", "cpu", "-c", EXAMPLES / "dpo_demo.yaml", f"train.output_dir={out}",
                  "rewards=[{fn: char_fraction, kwargs: {char: a}}]", f"data.eval={data}", "data.eval_prompts=3",
                  "train.max_steps=1", "eval.max_new_tokens=3", "eval.samples_per_prompt=2", "eval.temperature=0.5",
                  "eval.rewards=[{fn: char_fraction, kwargs: {char: a}, name: letter_again}]")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "answers of up to 3 new tokens: eval.max_new_tokens" in res.stderr
    end = json.loads((out / "summary.json").read_text())["eval"]["end"]
    assert (end["sampling"]["max_new_tokens"], end["sampling"]["n"], end["sampling"]["temperature"]) == (3, 2, 0.5)
    assert (end["n"], end["k"]) == (6, 2) and 0.0 <= end["pass_at_k"] <= 1.0
    assert end["per_reward"]["letter_again"] == end["per_reward"]["char_fraction"]  # eval-only, same function
    rows = [json.loads(line) for line in (out / "eval_completions.jsonl").read_text().splitlines()]
    assert {r["prompt_id"] for r in rows} == {"eval-0", "eval-1", "eval-2"}  # each prompt's first sample, each eval
