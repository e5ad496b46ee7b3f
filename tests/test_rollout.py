"""The rollout layer: sampling (masks, log-probs, seeds, PEFT), scoring through the safe reward suite,
and the completion-log writer."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlft.rewards import RewardFailureError  # noqa: E402
from rlft.rewards.safe import RewardSuite, SafeReward  # noqa: E402
from rlft.rollout import CompletionLog, Rollouts, SamplingParams, sample, score, score_texts  # noqa: E402
from rlft.rollout.sample import completion_mask  # noqa: E402

PROMPTS = ["Write z many times: ", "Write the letter q over and over again, please: "]  # different lengths


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlft.tiny import ensure_tiny_model

    torch.set_num_threads(1)
    path = ensure_tiny_model()
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _recomputed_logprobs(model, r: Rollouts, temperature: float) -> torch.Tensor:
    """log softmax(logits / T) of each sampled token from one plain forward pass over prompt + completion."""
    batch = r.model_inputs()
    P = batch.pop("prompt_len")
    assert P == r.prompt_ids_BP.size(1) and batch["input_ids"].shape == (len(r), P + r.completion_ids_BT.size(1))
    with torch.no_grad():
        logits = model(**batch).logits
    lp = torch.log_softmax(logits[:, P - 1:-1].float() / temperature, -1)
    return lp.gather(2, r.completion_ids_BT.unsqueeze(2)).squeeze(2) * r.completion_mask_BT


def test_completion_mask_keeps_the_first_eos_and_drops_the_rest():
    ids = torch.tensor([[5, 0, 1, 1], [5, 6, 7, 8], [0, 0, 3, 4]])
    mask, finished = completion_mask(ids, [0])
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert finished.tolist() == [True, False, True]
    mask, finished = completion_mask(ids, [])
    assert mask.tolist() == [[1] * 4] * 3 and not finished.any()


def test_sample_shapes_masks_and_logprobs(tiny):
    model, tok = tiny
    model.train()  # the sampler must switch dropout off and give the mode back
    r = sample(model, tok, PROMPTS, 3, SamplingParams(temperature=0.7, max_new_tokens=10, seed=1),
               prompt_ids=["a", "b"])
    assert model.training
    assert len(r) == 6 and r.n == 3 and r.prompt_index == [0, 0, 0, 1, 1, 1]
    assert r.row_prompt_ids() == ["a"] * 3 + ["b"] * 3 and r.row_prompt_texts()[3] == PROMPTS[1]
    B, T = r.completion_ids_BT.shape
    assert B == 6 and T <= 10 and r.logprobs_BT.shape == (B, T) and r.completion_mask_BT.shape == (B, T)
    # left padding: the shorter prompt's rows start with padding, the longer one's do not
    assert r.prompt_mask_BP[0, 0] == 0 and r.prompt_mask_BP[3].all()
    assert (r.prompt_ids_BP[0][r.prompt_mask_BP[0] == 0] == tok.pad_token_id).all()
    # sampler log-probs equal a plain forward pass at the sampling temperature
    torch.testing.assert_close(r.logprobs_BT, _recomputed_logprobs(model.eval(), r, 0.7), atol=2e-5, rtol=0)
    model.train()
    assert (r.logprobs_BT <= 0).all() and (r.logprobs_BT[r.completion_mask_BT.bool()] < 0).any()
    for b in range(B):
        expect, _ = completion_mask(r.completion_ids_BT[b:b + 1], [tok.eos_token_id])
        assert torch.equal(r.completion_mask_BT[b], expect[0])
        kept = r.completion_ids_BT[b][r.completion_mask_BT[b].bool()]
        assert r.completions[b] == tok.decode(kept, skip_special_tokens=True)


def test_sample_is_deterministic_under_a_seed(tiny):
    model, tok = tiny
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=7, batch_size=3)
    a = sample(model, tok, PROMPTS, 3, params)
    b = sample(model, tok, PROMPTS, 3, params)
    c = sample(model, tok, PROMPTS, 3, SamplingParams(temperature=1.0, max_new_tokens=8, seed=8, batch_size=3))
    assert torch.equal(a.completion_ids_BT, b.completion_ids_BT) and torch.equal(a.logprobs_BT, b.logprobs_BT)
    assert not torch.equal(a.completion_ids_BT, c.completion_ids_BT)
    torch.manual_seed(99)
    expected = torch.rand(3)
    torch.manual_seed(99)
    sample(model, tok, PROMPTS, 2, params)  # a seeded sample leaves the caller's random stream alone
    assert torch.equal(torch.rand(3), expected)
    with pytest.raises(ValueError, match="no prompts"):
        sample(model, tok, [], 2, params)


def test_chunked_sampling_pads_chunks_to_one_batch(tiny):
    model, tok = tiny
    r = sample(model, tok, PROMPTS * 2, 2, SamplingParams(max_new_tokens=6, seed=0, batch_size=2))  # 1 prompt per call
    assert len(r) == 8 and r.prompt_index == [0, 0, 1, 1, 2, 2, 3, 3]
    assert r.prompt_ids_BP.size(1) == max(int(m.sum()) for m in r.prompt_mask_BP)
    torch.testing.assert_close(r.logprobs_BT, _recomputed_logprobs(model, r, 1.0), atol=2e-5, rtol=0)


def test_sample_from_a_peft_model_uses_the_adapter(tiny):
    from peft import LoraConfig, get_peft_model

    base, tok = tiny
    import copy

    peft = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    r = sample(peft, tok, PROMPTS, 2, SamplingParams(max_new_tokens=6, seed=0))
    torch.testing.assert_close(r.logprobs_BT, _recomputed_logprobs(peft, r, 1.0), atol=2e-5, rtol=0)
    with peft.disable_adapter():
        lp_base = _recomputed_logprobs(peft, r, 1.0)
    assert (lp_base - r.logprobs_BT).abs().max() > 1e-3  # the adapter changed the sampler


def test_chat_prompts_go_through_the_chat_template(tiny):
    model, tok = tiny
    if not tok.chat_template:
        pytest.skip("tokenizer has no chat template")
    chat = [[{"role": "user", "content": "Write z many times"}]]
    r = sample(model, tok, chat, 2, SamplingParams(max_new_tokens=4, seed=0))
    expected = tok.apply_chat_template(chat[0], add_generation_prompt=True, tokenize=True,
                                       return_dict=True)["input_ids"]
    assert r.prompt_ids_BP[0][r.prompt_mask_BP[0].bool()].tolist() == list(expected)
    assert r.prompt_texts == ["Write z many times"]


# --- scoring --------------------------------------------------------------------------------------

def _fake_rollouts(completions, n, prompts):
    return Rollouts(prompts=prompts, prompt_texts=list(prompts), prompt_ids=list(range(len(prompts))), n=n,
                    prompt_index=[i for i in range(len(prompts)) for _ in range(n)], prompt_ids_BP=None,
                    prompt_mask_BP=None, completion_ids_BT=None, completion_mask_BT=None, logprobs_BT=None,
                    completions=completions)


def _suite(max_failure_fraction=0.5, min_completions=32):
    def count_target(prompts, completions, target, **kw):
        return [c.count(t) / max(1, len(c)) for c, t in zip(completions, target)]

    def fails_on_x(prompts, completions, **kw):
        return [float("nan") if "x" in c else 1.0 for c in completions]

    return RewardSuite([SafeReward("frac", count_target, 1.0), SafeReward("no_x", fails_on_x, 0.5)],
                       max_failure_fraction=max_failure_fraction, min_completions=min_completions)


def test_score_per_reward_total_columns_per_prompt_and_failures():
    r = _fake_rollouts(["zzzz", "zz ab", "qqx", "aaaa"], 2, ["p0", "p1"])
    s = score(r, _suite(), columns={"target": ["z", "q"]})
    assert s.names == ["frac", "no_x"]
    assert s.per_reward["frac"] == [1.0, 0.4, pytest.approx(2 / 3), 0.0]
    assert s.per_reward["no_x"] == [1.0, 1.0, None, 1.0]       # NaN from the function = no score
    assert s.total == [1.5, 0.9, None, 0.5] and s.valid == [True, True, False, True]
    t = s.total_tensor()
    assert torch.isnan(t[2]) and t[0] == 1.5
    assert s.per_reward_tensor().shape == (4, 2)
    with pytest.raises(ValueError, match="column 'target' has 1 values for 2 prompts"):
        score(r, _suite(), columns={"target": ["z"]})


def test_score_counts_toward_the_failure_guard_unless_told_not_to():
    suite = _suite(max_failure_fraction=0.4, min_completions=4)
    r = _fake_rollouts(["x1", "x2", "ok", "x3"], 2, ["p0", "p1"])
    score(r, suite, columns={"target": ["z", "q"]}, count=False)
    assert suite.seen == 0
    with pytest.raises(RewardFailureError, match="no score to 3 of 4"):
        score(r, suite, columns={"target": ["z", "q"]})


def test_row_ids_are_not_passed_to_rewards():
    seen = {}

    def grab(prompts, completions, **kw):
        seen.update(kw)
        return [1.0] * len(completions)

    r = _fake_rollouts(["a", "b"], 1, ["p0", "p1"])
    score(r, RewardSuite([SafeReward("grab", grab)]), columns={"prompt_id": [7, 8], "target": ["x", "y"]})
    assert seen == {"target": ["x", "y"]}


def test_score_texts_makes_chat_messages_plain_text():
    seen = {}

    def grab(prompts, completions, **kw):
        seen["p"], seen["c"] = prompts, completions
        return [1.0] * len(completions)

    s = score_texts(RewardSuite([SafeReward("grab", grab)]), [[{"role": "user", "content": "hi"}]],
                    [[{"role": "assistant", "content": "yo"}]])
    assert seen == {"p": ["hi"], "c": ["yo"]} and s.total == [1.0]


# --- completion log -------------------------------------------------------------------------------

def test_completion_log_counts_completions_not_groups(tmp_path):
    r = _fake_rollouts(["a", "b", "c", "d"], 2, ["p0", "p1"])
    s = score(r, _suite(), columns={"target": ["a", "q"]})
    path = tmp_path / "completions.jsonl"
    assert CompletionLog(path, 3).write_rollouts(5, r, s, advantages=torch.tensor([0.5, -0.5, 0.0, 0.0])) == 3
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(rows) == 3
    assert rows[0] == {"step": 5, "prompt_id": 0, "prompt": "p0", "completion": "a",
                       "rewards": {"frac": 1.0, "no_x": 1.0}, "total": 1.5, "advantage": 0.5}
    assert rows[2]["prompt_id"] == 1 and "weight" not in rows[2]
    assert CompletionLog(path, -1).write_rollouts(6, r, s, weights=[1, 2, 3, 4], extra={"round": [0] * 4}) == 4
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(rows) == 7 and rows[-1]["weight"] == 4 and rows[-1]["round"] == 0 and "advantage" not in rows[-1]
    assert CompletionLog(path, 0).write_rollouts(7, r, s) == 0 and CompletionLog(None, 4).write_rollouts(7, r, s) == 0
    assert len(path.read_text().splitlines()) == 7


@pytest.mark.e2e
def test_sampling_benchmark_runs_and_draws_the_same_tokens_as_plain_generate():
    import subprocess
    import sys

    from rlft.config import configs_dir

    root = configs_dir().parent
    script = root.parent / "scripts" / "bench_rollout_sampling.py"
    if not script.is_file():
        pytest.skip("scripts/ not shipped with this install")
    proc = subprocess.run([sys.executable, str(script), "--prompts", "2", "--n", "2", "--max-new-tokens", "4",
                           "--rounds", "1"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "same tokens drawn: True" in proc.stdout and "ratio rlft/plain" in proc.stdout


def test_reward_suite_itself_never_passes_row_ids():
    """Stages that call the suite directly (not through rollout.score) get the same rule."""
    seen = {}

    def grab(prompts, completions, answer):  # a strict signature: an extra column would make it fail
        seen["answer"] = answer
        return [1.0] * len(completions)

    s = RewardSuite([SafeReward("grab", grab)]).score(["p"], ["c"], {"prompt_id": [3], "answer": ["a"]})
    assert s.total == [1.0] and seen == {"answer": ["a"]}


def test_evaluate_is_seeded_uncounted_and_leaves_no_metrics_behind(tiny):
    from rlft.rollout import evaluate

    model, tok = tiny
    suite = RewardSuite([SafeReward("len", lambda p, c, **kw: [len(x) / 100 for x in c])])
    params = SamplingParams(max_new_tokens=6, seed=5)
    a = evaluate(model, tok, suite, PROMPTS, {}, 3, params)
    b = evaluate(model, tok, suite, PROMPTS, {}, 3, params)
    assert a == b and a["n"] == 6 and a["prompts"] == 2 and a["unscored"] == 0 and a["reward_mean"] > 0
    assert suite.seen == 0 and suite.metrics() == {"rewards/len/errors": 0.0}  # nothing left in the window
