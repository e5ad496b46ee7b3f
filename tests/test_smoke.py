"""`--smoke`: a config run as given on a CPU, with only what a CPU runner cannot do replaced (the model by a tiny
one of its family, the hardware by one fp32 CPU process, the size by a few steps), each change recorded; the
same-family model builder; errors only this machine causes; and, end to end, the tool-use pipeline of the
guide's A100 profile, a GRPO config naming SmolLM2-135M-Instruct, and configs that must fail as the real run does."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, read_jsonl, run_cli
from test_realmodel import CACHE as REALMODEL_CACHE
from test_realmodel import smollm2  # noqa: F401 - the fixture that converts SmolLM2, used when opted in
from rlft.config.compose import compose
from rlft.config.errors import ConfigError
from rlft.config.validate import validate

EXAMPLES = ROOT / "configs" / "examples"
TOOL_USE = EXAMPLES / "pipeline_tool_use.yaml"


@pytest.fixture
def empty_hub(tmp_path, monkeypatch):
    """An empty Hugging Face cache, so a hub id is never found on this machine."""
    import huggingface_hub.constants as hub

    folder = tmp_path / "hf" / "hub"
    folder.mkdir(parents=True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(folder))
    return folder


def _tiny_tokenizer_files(dest: Path) -> None:
    from rlft.tiny import ensure_tiny_model

    src = ensure_tiny_model()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (src / name).is_file():
            shutil.copy(src / name, dest / name)


REAL_CONFIGS = {
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256,
              "intermediate_size": 688,
              "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 520,
              "max_position_embeddings": 1024, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 192,
              "intermediate_size": 512,
              "num_hidden_layers": 5, "num_attention_heads": 6, "num_key_value_heads": 6, "head_dim": 32,
              "vocab_size": 520, "max_position_embeddings": 1024, "tie_word_embeddings": True,
              "torch_dtype": "bfloat16"},
}


@pytest.mark.parametrize("family", sorted(REAL_CONFIGS))
def test_same_family_model_from_config_and_tokenizer(tmp_path, family):
    from rlft.models.tiny_family import MARKER_FILE, ensure_family_model, find_model_files

    real = tmp_path / "real-model"
    real.mkdir()
    (real / "config.json").write_text(json.dumps(REAL_CONFIGS[family]))
    _tiny_tokenizer_files(real)
    files, why = find_model_files(str(real))
    assert files is not None, why
    built, marker = ensure_family_model(files, cache_dir=tmp_path / "cache")
    config = json.loads((built / "config.json").read_text())
    assert config["architectures"] == REAL_CONFIGS[family]["architectures"]
    assert config["vocab_size"] == 520 and config["num_hidden_layers"] == 2 and config["hidden_size"] == 64
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    assert heads == 4 and kv == (2 if family == "qwen2" else 4)  # grouped-query attention stays grouped
    assert config.get("head_dim", 16) == 16 and config["intermediate_size"] == 128
    assert config["tie_word_embeddings"] == REAL_CONFIGS[family]["tie_word_embeddings"]
    assert marker["shrunk"]["num_hidden_layers"] == [REAL_CONFIGS[family]["num_hidden_layers"], 2]
    from transformers import AutoTokenizer

    template = AutoTokenizer.from_pretrained(str(real)).chat_template
    assert AutoTokenizer.from_pretrained(str(built)).chat_template == template
    weights = built / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    again, _ = ensure_family_model(files, cache_dir=tmp_path / "cache")  # cached by the hash of the real files
    assert again == built and weights.stat().st_mtime_ns == stamp
    changed = dict(REAL_CONFIGS[family], rms_norm_eps=1e-5)
    (real / "config.json").write_text(json.dumps(changed))
    other, _ = ensure_family_model(files, cache_dir=tmp_path / "cache")
    assert other != built and (other / MARKER_FILE).is_file()
    assert not [p for p in (tmp_path / "cache" / "smoke-models").iterdir() if ".tmp-" in p.name]


def test_model_files_found_in_the_hub_cache_without_network(tmp_path, empty_hub):
    from rlft.models.tiny_family import find_model_files

    repo = empty_hub / "models--acme--chat-1b"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snap / "config.json").write_text(json.dumps(REAL_CONFIGS["qwen2"]))
    files, why = find_model_files("acme/chat-1b")
    assert files is None and "no tokenizer files" in why  # a config alone is not enough: the tokenizer is tested
    _tiny_tokenizer_files(snap)
    files, _ = find_model_files("acme/chat-1b")
    assert files is not None and files.folder == snap and files.where == "the Hugging Face cache"
    assert find_model_files("acme/other-7b") == (None, "not a local folder and not in the Hugging Face cache")


def _stage_configs(hw: str):
    from rlft.pipeline.spec import load_pipeline
    from rlft.smoke.validate import check_pipeline_as_given

    pipe = load_pipeline(TOOL_USE)
    return pipe, check_pipeline_as_given(pipe, [], hw)


def test_pipeline_changes_are_valid_and_only_what_a_cpu_cannot_do(empty_hub):
    """Each stage of the A100 tool-use pipeline: the smoke layer validates, goes to one fp32 CPU process, keeps
    the section's divisibility rules, and leaves the rest (data, rewards, LoRA, loss settings) as given."""
    from rlft.config.compose import flatten
    from rlft.config.schema import to_dict
    from rlft.pipeline.spec import compose_stage
    from rlft.smoke.changes import as_layer, choose_model, smoke_changes

    pipe, checked = _stage_configs("a100")
    choice = choose_model("Qwen/Qwen2.5-Coder-7B-Instruct")
    assert choice.path == "tiny" and "not in the Hugging Face cache" in choice.why
    for entry, cfg0, composed0, _ in checked:
        changes = smoke_changes(cfg0, composed0, choice, None, own_init_from=entry.sets_init_from)
        composed = compose_stage(pipe, entry, [], [], "a100", None, (as_layer(changes),))
        cfg, _ = validate(composed, for_train=True)
        assert (cfg.hw.device, cfg.hw.num_processes, cfg.train.bf16, cfg.train.tf32) == ("cpu", 1, False, None)
        assert cfg.model.name_or_path == "tiny" and cfg.train.max_seq_length == 256
        before, after = flatten(to_dict(cfg0)), flatten(to_dict(cfg))
        moved = {k for k in after if before.get(k) != after.get(k) and not isinstance(after[k], dict)}
        assert moved <= {c.key for c in changes}, moved - {c.key for c in changes}
        assert not any(k.startswith(("rewards", "lora.", "data.train", "data.chat_template")) for k in moved)
        assert all(c.why for c in changes)
        if entry.stage == "ppo":
            p = cfg.ppo
            assert p.batch_size % p.mini_batch_size == 0 and p.num_episodes == 2 * p.batch_size
            assert p.save_interval == p.batch_size and cfg.train.max_steps == -1  # PPO counts episodes
        elif entry.stage == "rs_sft":
            assert cfg.rs_sft.rounds == 1 and cfg.rs_sft.num_samples_per_prompt == 2 and cfg.train.max_steps == 2
        else:
            assert cfg.train.max_steps == 2 and cfg.train.save_steps == 1


def test_grpo_sizes_follow_the_divisibility_rules():
    from rlft.smoke.changes import ModelChoice, as_layer, smoke_changes

    over = ["data.train=demo", "rewards=[{fn: char_fraction}]", "grpo.batch_size=24", "grpo.num_substeps=3",
            "grpo.stream_minibatch.num_minibatches=2", "grpo.group_size=8"]
    composed0 = compose("grpo", "rtx4090", [], over)
    cfg0, _ = validate(composed0, for_train=True)
    changes = smoke_changes(cfg0, composed0, ModelChoice("tiny", "tiny", "", False), "runs/smoke/x")
    cfg, _ = validate(compose("grpo", "rtx4090", [], over, last=[as_layer(changes)]), for_train=True)
    g = cfg.grpo
    assert (g.batch_size, g.num_substeps, g.stream_minibatch.num_minibatches, g.group_size) == (6, 3, 2, 2)
    assert cfg.train.output_dir == "runs/smoke/x" and cfg.hw.device == "cpu"


def test_errors_only_this_machine_causes_are_reported_not_fatal(tmp_path):
    from rlft.smoke.validate import NOT_CHECKED, load_as_given

    user = tmp_path / "my.yaml"
    user.write_text("model: {name_or_path: /nowhere/llama-3-8b}\ntrain: {learning_rate: auto}\ndata: {train: demo}\n"
                    "rewards: [{fn: char_fraction}]\ngrpo: {generation_backend: vllm, batch_size: 8}\n")
    with pytest.raises(ConfigError):  # as `rlft train` sees it
        validate(compose("grpo", "a100", [user], []), for_train=True)
    cfg, _, warnings = load_as_given("grpo", "a100", [user], [])
    notes = {w.key for w in warnings if w.message.startswith(NOT_CHECKED)}
    assert notes == {"model.name_or_path", "train.learning_rate", "grpo.generation_backend"}
    assert cfg.model.name_or_path == "/nowhere/llama-3-8b" and cfg.grpo.generation_backend == "vllm"  # as given
    with pytest.raises(ConfigError) as err:  # any other error still stops the smoke run
        load_as_given("grpo", "a100", [user], ["grpo.group_size=1"])
    assert [p.key for p in err.value.problems if p.level == "error"] == ["grpo.group_size"]


def test_smoke_refuses_resume_and_overwrite(tmp_path):
    res = run_cli("train", "--stage", "grpo", "-c", EXAMPLES / "grpo_demo.yaml", "--smoke", "--resume", cwd=tmp_path)
    assert res.returncode == 2 and "--resume does not go with --smoke" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "runs").exists()


def test_misnamed_data_column_stops_smoke_as_the_real_run(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?",
                                        "answer": str(i + 1)}) + "\n" for i in range(8)))
    args = ["train", "--stage", "grpo", f"data.train={data}", "rewards=[{fn: numeric_match}]"]
    real, smoke = run_cli(*args, cwd=tmp_path), run_cli(*args, "--smoke", cwd=tmp_path)
    assert real.returncode == smoke.returncode == 2
    line = next(x for x in real.stderr.splitlines() if x.startswith("error:"))
    assert "prompt" in line and line in smoke.stderr.splitlines()
    assert not (tmp_path / "runs").exists()


# -- end to end ------------------------------------------------------------------------------------
def _env(tmp_path, **extra):
    return {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"), **extra}


def _smoke_root(cwd: Path) -> Path:
    found = sorted((cwd / "runs" / "smoke").iterdir())
    assert len(found) == 1, found
    return found[0]


@pytest.mark.e2e
def test_tool_use_pipeline_smoke_on_cpu(tmp_path):
    """The guide's 7B ORPO -> RS-SFT -> PPO pipeline for an A100, on this CPU, with no model on the machine."""
    start = time.monotonic()
    res = run_cli("pipeline", "run", TOOL_USE, "--hw", "a100", "--smoke", cwd=tmp_path, env=_env(tmp_path), timeout=600)
    wall = time.monotonic() - start
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert wall < 180, wall
    assert "rlft smoke: PASSED (exit 0)" in res.stdout
    root = _smoke_root(tmp_path)
    assert not (tmp_path / "runs" / "tool_use").exists()  # the real pipeline folder is never written
    block = json.loads((root / "pipeline_summary.json").read_text())["smoke"]
    assert block["result"] == "passed" and block["exit_code"] == 0
    model = [c for c in block["replaced"] if c["key"] == "model.name_or_path"]
    assert {c["now"] for c in model} == {"tiny"} and len(model) == 3
    assert "not a local folder and not in the Hugging Face cache" in model[0]["why"]
    assert any("tokenizer and chat template" in n for n in block["not_tested"])
    for i, stage in enumerate(("orpo", "rs_sft", "ppo"), start=1):
        run = root / f"{i:02d}-{stage}"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["smoke"]["result"] == "passed"
        assert (run / "checkpoints" / "checkpoint-1").is_dir() and (run / "final").is_dir()
        assert (run / "report" / "index.html").is_file()
        assert "device: cpu" in (run / "config.yaml").read_text()
        assert f"stage {i} ({stage}): checkpoint at step 1, then --resume from it to the end" in res.stdout
    assert "stage 3 (ppo): started from stage 2 (rs_sft)'s model" in res.stdout
    print(f"tool-use pipeline smoke: {wall:.1f} s")


def _smollm2(request) -> Path:
    folder = REALMODEL_CACHE / "smollm2-135m-instruct"
    if (folder / "rlft_converted").is_file():
        return folder
    if os.environ.get("RLFT_REALMODEL") != "1":
        pytest.skip("needs SmolLM2-135M-Instruct converted by tests/test_realmodel.py (opt-in: RLFT_REALMODEL=1)")
    return request.getfixturevalue("smollm2")


@pytest.mark.e2e
def test_grpo_smoke_builds_smollm2_family_model(tmp_path, request):
    real = _smollm2(request)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n"
                            for a, b in ((2, 3), (4, 4), (1, 6), (3, 3))))
    user = tmp_path / "my.yaml"
    user.write_text(f"model: {{name_or_path: {real}}}\ndata: {{train: {data}}}\n"
                    f"rewards: [{{fn: numeric_match, kwargs: {{column: answer}}}}]\ngrpo: {{batch_size: 4}}\n")
    start = time.monotonic()
    res = run_cli("train", "--stage", "grpo", "--hw", "a100", "-c", user, "--smoke", cwd=tmp_path,
                  env=_env(tmp_path, RLFT_CACHE=str(tmp_path / "cache")), timeout=600)
    wall = time.monotonic() - start
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert wall < 60, wall
    root = _smoke_root(tmp_path)
    built = Path(json.loads((root / "summary.json").read_text())["smoke"]["replaced"][0]["now"])
    assert built.parent == tmp_path / "cache" / "smoke-models"
    config = json.loads((built / "config.json").read_text())
    assert config["vocab_size"] == 49152 and config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_hidden_layers"] == 2
    rendered = [r["prompt_rendered"] for r in read_jsonl(root / "completions.jsonl") if r.get("prompt_rendered")]
    assert rendered and all("<|im_start|>user" in r for r in rendered)
    print(f"SmolLM2-family GRPO smoke: {wall:.1f} s")


@pytest.mark.e2e
def test_reward_failing_everywhere_fails_smoke_as_the_real_run(tmp_path):
    (tmp_path / "broken.py").write_text("def broken(prompts, completions, **kw):\n"
                                        "    raise ValueError('this reward always fails')\n")
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Repeat the letter {c}:"}) + "\n" for c in "abcdefgh"))
    user = tmp_path / "my.yaml"
    user.write_text(f"data: {{train: {data}}}\nrewards: [{{fn: {tmp_path / 'broken.py'}:broken}}]\n"
                    "grpo: {batch_size: 8, group_size: 4, num_substeps: 1, ppo_epochs: 1, max_tokens: 8}\n"
                    "train: {max_steps: 2}\n")
    real = run_cli("train", "--stage", "grpo", "-c", user, "train.output_dir=real", cwd=tmp_path)
    smoke = run_cli("train", "--stage", "grpo", "-c", user, "--smoke", cwd=tmp_path)
    assert real.returncode == smoke.returncode == 4, smoke.stderr[-2000:]
    guard = "above max_failure_fraction=0.5. Failing: 'broken': "
    assert guard in real.stderr and guard in smoke.stderr.splitlines()[-1]
    assert "ValueError: this reward always fails" in smoke.stderr.splitlines()[-1]
    assert json.loads((_smoke_root(tmp_path) / "summary.json").read_text())["smoke"]["result"] == "failed"


# -- a damaged or hostile config.json (issue 35) ----------------------------------------------------------------
HOSTILE_CONFIGS = [
    ('{"model_type": "llama", "vocab', "config.json is damaged: not valid JSON"),
    ("[1, 2, 3]", "config.json is damaged: expected a JSON object of model settings, got a list"),
    ('"llama"', "config.json is damaged: expected a JSON object of model settings, got a string"),
    ("", "config.json is damaged: not valid JSON"),
    ("[" * 100000, "config.json is damaged"),
    ('{"model_type": "llama", "vocab_size": 1000000000}', "config.json: vocab_size 1000000000 is out of range; "
                                                          "expected an integer between 1 and 1048576"),
    ('{"model_type": "llama", "vocab_size": -5}', "config.json: vocab_size -5 is out of range"),
    ('{"model_type": "llama", "vocab_size": 1e9}', "config.json: vocab_size is 1000000000.0, not a whole number"),
    ('{"model_type": "llama", "vocab_size": NaN}', "config.json: vocab_size is NaN, not a whole number"),
    ('{"model_type": "llama", "vocab_size": Infinity}', "config.json: vocab_size is Infinity, not a whole number"),
    ('{"model_type": "llama", "vocab_size": true}', "config.json: vocab_size is true, not a whole number"),
    ('{"model_type": "llama", "vocab_size": "32000"}', 'config.json: vocab_size is "32000", not a whole number'),
    ('{"model_type": "llama", "vocab_size": 32000, "hidden_size": [64]}', "config.json: hidden_size is a list"),
    ('{"model_type": "llama", "vocab_size": 32000, "max_position_embeddings": 10000000000000}',
     "config.json: max_position_embeddings 10000000000000 is out of range"),
    ('{"model_type": "gpt2", "vocab_size": 32000, "n_positions": 0}', "config.json: n_positions 0 is out of range"),
    ('{"model_type": "llava", "text_config": {"vocab_size": 1000000000}}',
     "config.json: text_config.vocab_size 1000000000 is out of range"),
]


def _model_folder(tmp_path: Path, text: str) -> Path:
    real = tmp_path / "real"
    real.mkdir()
    (real / "config.json").write_text(text)
    (real / "tokenizer.json").write_text("{}")  # a tokenizer is there: the config decides
    return real


@pytest.mark.parametrize("text, message", HOSTILE_CONFIGS)
def test_a_damaged_or_huge_config_json_is_one_line_before_anything_is_built(tmp_path, text, message):
    """A truncated or non-object config.json gave a traceback; `vocab_size: 10**9` built a 256 GB "tiny" model. Every
    size the smoke model is built from is checked first: one line naming the file and the field, nothing built."""
    from rlft.models.config_json import ConfigJsonError
    from rlft.models.tiny_family import ensure_family_model, find_model_files

    real = _model_folder(tmp_path, text)
    files, why = find_model_files(str(real))
    assert files is not None, why
    with pytest.raises(ConfigJsonError) as exc:
        ensure_family_model(files, cache_dir=tmp_path / "cache")
    assert str(exc.value).startswith(str(real / "config.json")) and message in str(exc.value)
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.safetensors"))


@pytest.mark.parametrize("text, message", [HOSTILE_CONFIGS[0], HOSTILE_CONFIGS[1], HOSTILE_CONFIGS[5]])
def test_smoke_with_a_damaged_config_json_exits_2_naming_it(tmp_path, text, message):
    real = _model_folder(tmp_path, text)
    res = run_cli("train", "--stage", "grpo", "-c", EXAMPLES / "grpo_demo.yaml", f"model.name_or_path={real}",
                  "--smoke", cwd=tmp_path, env=_env(tmp_path, RLFT_CACHE=str(tmp_path / "cache")), timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert errors == [x for x in res.stderr.splitlines() if x.strip() and not x.startswith("warning:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {real / 'config.json'}") and message in errors[0]
    assert not (tmp_path / "runs").exists()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(key=st.sampled_from(["vocab_size", "hidden_size", "num_hidden_layers", "num_key_value_heads",
                            "max_position_embeddings", "num_local_experts", "first_k_dense_replace", "rope_theta"]),
       value=st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                       st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
                       st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(),
                                                                            max_size=2)))
def test_config_json_sizes_are_whole_numbers_in_range_or_named(key, value):
    from rlft.models.config_json import SIZE_FIELDS, ConfigJsonError, check_sizes

    try:
        check_sizes({"model_type": "llama", key: value}, "m/config.json")
    except ConfigJsonError as exc:
        assert str(exc).startswith(f"m/config.json: {key} ") and "\n" not in str(exc)
        assert f"expected an integer between {SIZE_FIELDS[key][0]} and {SIZE_FIELDS[key][1]}" in str(exc)
        return
    ok = value is None or key not in SIZE_FIELDS or (
        type(value) is int and SIZE_FIELDS[key][0] <= value <= SIZE_FIELDS[key][1])
    assert ok, (key, value)
