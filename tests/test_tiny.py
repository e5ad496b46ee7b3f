"""rlft's offline tiny model (rlft.tiny) and the built-in GRPO demo task (rlft.data.demo)."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rlft import tiny
from rlft.data import demo
from rlft.rewards.builtin import char_fraction

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Repeat the letter z: "


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return tiny.build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_imports_are_lazy():
    code = ("import sys, rlft.tiny, rlft.data.demo; "
            "heavy = [m for m in ('torch', 'transformers', 'tokenizers', 'trl', 'peft') if m in sys.modules]; "
            "assert not heavy, heavy")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_folder_layout_and_marker(built):
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", tiny.MARKER_FILE):
        assert (built / name).is_file(), name
    marker = json.loads((built / tiny.MARKER_FILE).read_text())
    assert marker["format_version"] == tiny.FORMAT_VERSION
    assert marker["init_std"] == tiny.DEFAULT_INIT_STD
    assert (marker["arch"], marker["hidden_size"], marker["num_layers"], marker["vocab_size"]) == ("qwen2", 64, 2, 512)
    assert marker["tokenizer_size"] == 512


def test_reloads_through_auto_classes_and_generates(built):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    cfg = model.config
    assert cfg.model_type == "qwen2" and cfg.tie_word_embeddings
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (64, 2, 512)
    assert cfg.initializer_range == pytest.approx(tiny.DEFAULT_INIT_STD)
    assert cfg.max_position_embeddings >= 512
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert model.model.embed_tokens.weight.std().item() == pytest.approx(tiny.DEFAULT_INIT_STD, rel=0.1)

    assert tok.pad_token == "<|pad|>" and tok.eos_token == "<|endoftext|>"
    assert tok.pad_token_id != tok.eos_token_id
    assert (cfg.pad_token_id, cfg.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)
    assert tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [2, 3]

    text = "Hello, world! 12 + 30 = 42; Repeat the letter z: zzzz"
    assert tok.decode(tok(text)["input_ids"]) == text
    # the reloaded tokenizer tokenizes exactly as the trained one
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(built / "tokenizer.json"))
    assert tok(text)["input_ids"] == raw.encode(text).ids
    # every lowercase letter (so every demo letter) has a family of run tokens
    vocab = set(tok.get_vocab())
    assert all({c, c * 2, c * 4} <= vocab for c in "abcdefghijklmnopqrstuvwxyz")

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say z."}]
    rendered = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert rendered == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay z.<|im_end|>\n"
                        "<|im_start|>assistant\n")
    assert not tok.apply_chat_template(msgs, tokenize=False).endswith("<|im_start|>assistant\n")

    enc = tok([PROMPT, "Write z many times: "], return_tensors="pt", padding=True)
    assert tok.padding_side == "left" and enc["input_ids"][0, 0] == tok.pad_token_id
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=5, do_sample=True, pad_token_id=tok.pad_token_id)
    new = out[:, enc["input_ids"].shape[1]:]
    assert new.shape == (2, 5)
    assert all(isinstance(s, str) for s in tok.batch_decode(new, skip_special_tokens=True))


def test_build_is_deterministic(built, tmp_path):
    import torch
    from safetensors.torch import load_file

    again = tiny.build_tiny_model(tmp_path / "again")
    a, b = load_file(built / "model.safetensors"), load_file(again / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (built / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()
    # another seed or scale gives other weights (same tokenizer)
    other = load_file(tiny.build_tiny_model(tmp_path / "other", seed=1, init_std=0.2) / "model.safetensors")
    key = "model.embed_tokens.weight"
    assert not torch.equal(a[key], other[key])
    assert (tmp_path / "other" / "tokenizer.json").read_bytes() == (built / "tokenizer.json").read_bytes()


def test_build_leaves_the_global_rng_alone(tmp_path):
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny.build_tiny_model(tmp_path / "m", num_layers=1)
    assert torch.equal(torch.rand(3), expected)


def test_ensure_tiny_model_caches(tmp_path, monkeypatch):
    first = tiny.ensure_tiny_model(tmp_path)
    assert first.parent == tmp_path and first.name == tiny.tiny_model_name()
    assert first.name.startswith(f"tiny-qwen2-h64-l2-a4-voc512-std{tiny.DEFAULT_INIT_STD:g}-s0-v{tiny.FORMAT_VERSION}")
    stamp = (first / "model.safetensors").stat().st_mtime_ns

    def no_rebuild(*args, **kwargs):
        raise AssertionError("ensure_tiny_model rebuilt a cached model")

    monkeypatch.setattr(tiny, "build_tiny_model", no_rebuild)
    assert tiny.ensure_tiny_model(tmp_path) == first
    monkeypatch.setenv("RLFT_CACHE", str(tmp_path))
    assert tiny.ensure_tiny_model() == first  # the default cache folder follows $RLFT_CACHE
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary folders left behind


def test_ensure_tiny_model_distinguishes_args_and_rejects_unknown(tmp_path):
    assert tiny.tiny_model_name(init_std=0.2) != tiny.tiny_model_name(init_std=0.02)
    assert tiny.tiny_model_name(seed=1) != tiny.tiny_model_name()
    with pytest.raises(TypeError):
        tiny.ensure_tiny_model(tmp_path, hidden=32)
    with pytest.raises(ValueError):
        tiny.build_tiny_model(tmp_path / "bad", hidden_size=30, num_heads=4)
    with pytest.raises(ValueError):
        tiny.build_tiny_model(tmp_path / "bad", arch="gpt9")


def test_ensure_tiny_model_concurrent_builders(tmp_path):
    results, errors = [], []

    def worker():
        try:
            results.append(tiny.ensure_tiny_model(tmp_path, num_layers=1))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(set(results)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [results[0].name]
    assert (results[0] / tiny.MARKER_FILE).is_file()


def test_ensure_tiny_model_replaces_an_incomplete_folder(tmp_path):
    stale = tmp_path / tiny.tiny_model_name(num_layers=1)
    stale.mkdir()
    (stale / "config.json").write_text("{}")
    path = tiny.ensure_tiny_model(tmp_path, num_layers=1)
    assert path == stale and (path / tiny.MARKER_FILE).is_file() and (path / "model.safetensors").is_file()


# --- the demo task ---------------------------------------------------------------------------------


def test_demo_prompts():
    rows = demo.demo_prompts()
    assert len(rows) == 64 and rows == demo.demo_prompts()
    assert all(set(r) == {"prompt", "target"} for r in rows)
    assert {r["target"] for r in rows} == set(demo.DEMO_LETTERS)
    assert all(r["target"] in r["prompt"] for r in rows)
    assert {demo.target_from_prompt(r["prompt"]) for r in rows} == set(demo.DEMO_LETTERS)
    assert len({r["prompt"] for r in rows}) > 1  # several phrasings
    multi = demo.demo_prompts(n=40, seed=3, letters="abcd")
    assert [sum(r["target"] == c for r in multi) for c in "abcd"] == [10, 10, 10, 10]
    assert all(demo.target_from_prompt(r["prompt"]) == r["target"] for r in multi)
    assert demo.demo_prompts(n=0) == []
    with pytest.raises(ValueError):
        demo.demo_prompts(letters="")


def test_the_demo_rows_are_scored_by_the_built_in_char_fraction():
    completions = ["zzzz", "z z a", "zzzz and", "", "   ", "abc", "Z z"]
    rows = demo.demo_prompts(n=7)  # the `target` column the built-in reads, as TRL passes dataset columns
    targets = [r["target"] for r in rows]
    assert char_fraction([r["prompt"] for r in rows], completions, target=targets) == [
        1.0, 2 / 3, 4 / 7, 0.0, 0.0, 0.0, 0.5]
    multi = demo.demo_prompts(n=2, seed=3, letters="ab")
    assert char_fraction([], ["aab", "aab"], target=[r["target"] for r in multi]) == (
        [2 / 3, 1 / 3] if multi[0]["target"] == "a" else [1 / 3, 2 / 3])
    # conversational completions, and the extra keyword arguments TRL passes
    conv = [[{"role": "assistant", "content": "zz z!"}]]
    assert char_fraction(rows[:1], conv, target=["z"], completion_ids=[[1]], trainer_state=None) == [0.75]


def test_write_demo_dataset(tmp_path):
    path = demo.write_demo_dataset(tmp_path / "sub" / "demo.jsonl", n=8)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == demo.demo_prompts(n=8)


def test_the_cache_name_defaults_are_the_builders():
    import inspect

    params = inspect.signature(tiny.build_tiny_model).parameters
    assert {n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY} == tiny.BUILD_DEFAULTS


def test_tiny_model_heads_option(tmp_path):
    """`--heads 2`: the same model with head size 32 (vLLM's CPU attention refuses 16); a bad count exits 2."""
    from tests.conftest import run_cli

    out = tmp_path / "two"
    res = run_cli("tiny-model", out, "--heads", "2")
    assert res.returncode == 0, res.stderr
    config = json.loads((out / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["hidden_size"]) == (2, 2, 64)
    assert json.loads((out / tiny.MARKER_FILE).read_text())["num_heads"] == 2
    res = run_cli("tiny-model", tmp_path / "bad", "--heads", "3")
    assert res.returncode == 2 and "--heads must be one of 1, 2, 4" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "bad").exists()
