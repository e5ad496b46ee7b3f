"""`rlft plan`: the memory formulas on hand-computed cases, the plan of whole configs, the levers, and the
command (text, --json, a missing config.json, validate-config's warning)."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from rlft.config import load_config
from rlft.plan import terms as T
from rlft.plan.advise import levers, with_overrides
from rlft.plan.estimate import make_plan
from rlft.plan.model_shape import ShapeError, load_shape, shape_from_config

GIB = 2 ** 30
# Llama-2-7B's config.json (the fields that shape it): 6,738,415,616 parameters, the figure Meta publishes
LLAMA2_7B = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
             "tie_word_embeddings": False}
# SmolLM2-135M-Instruct's: grouped-query attention (9 heads, 3 kv heads), tied embeddings
SMOLLM2 = {"model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
           "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
           "tie_word_embeddings": True}
ALL7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_parameter_count_of_llama2_7b():
    s = shape_from_config(LLAMA2_7B)
    # embeddings + LM head: 2 x 32000 x 4096 = 262,144,000
    # per layer: q, k, v, o 4 x 4096^2 = 67,108,864; MLP 3 x 4096 x 11008 = 135,266,304; 2 norms 8,192
    # 32 layers x 202,383,360 = 6,476,267,520; final norm 4,096
    assert s.num_params() == 262_144_000 + 32 * 202_383_360 + 4096 == 6_738_415_616


def test_parameter_and_lora_count_of_smollm2():
    s = shape_from_config(SMOLLM2)
    # tied embeddings 49152 x 576 = 28,311,552; per layer q 576 x 576 + k, v 2 x 576 x 192 + o 576 x 576
    # + MLP 3 x 576 x 1536 + norms 2 x 576 = 3,540,096; 30 layers; final norm 576 (torch counts 134,515,008)
    assert s.num_params() == 28_311_552 + 30 * 3_540_096 + 576 == 134_515_008
    n, _, adapted, missing = s.lora(ALL7 + ["c_attn"], 16)
    # r 16 x (in + out): q 1152, k 768, v 768, o 1152, gate 2112, up 2112, down 2112 = 10,176 x 16 = 162,816 per
    # layer, x 30 layers (PEFT counts 4,884,480)
    assert n == 30 * 16 * (1152 + 768 + 768 + 1152 + 3 * 2112) == 4_884_480
    assert adapted == ALL7 and missing == ["c_attn"]


def test_weights_gradients_optimizer_bytes():
    # 7B in bf16: 6,738,415,616 x 2 B = 13,476,831,232 B = 12.55 GiB; over 4 FSDP ranks a quarter
    assert T.weights(6_738_415_616, 2).bytes == 13_476_831_232
    assert T.weights(6_738_415_616, 2, shard=4).bytes == 13_476_831_232 / 4
    # LoRA r=16 on SmolLM2 (4,884,480 fp32 params): gradients 4 B each, AdamW 2 x 4 B each
    assert T.gradients(4_884_480, 4).bytes == 19_537_920
    assert T.optimizer_state("adamw_torch", 4_884_480, 4, []).bytes == 39_075_840
    # 8-bit AdamW: 2 states x (1 B + an fp32 absmax per 256 values) = 2.03125 B per param
    assert T.optimizer_state("paged_adamw_8bit", 1024, 4, []).bytes == 1024 * 2.03125
    # Adafactor: a row and a column vector per matrix, a full vector per 1-d tensor: (10 + 20) + 5 values x 4 B
    assert T.optimizer_state("adafactor", 205, 4, [(10, 20), (5, 1)]).bytes == 35 * 4
    assert T.optimizer_state("sgd", 1000, 4, []).bytes == 0


def test_master_copies():
    # fp32 LoRA params under bf16 autocast: autocast's 16-bit weight cache, 2 B each
    assert T.master_copies(1000, 4, 2, deepspeed=False).bytes == 2000
    # HF Trainer trains bf16 weights in bf16: no fp32 master; DeepSpeed keeps one, 4 B each, sharded by ZeRO
    assert T.master_copies(1000, 2, 2, deepspeed=False).bytes == 0
    assert T.master_copies(1000, 2, 2, deepspeed=True, shard=4).bytes == 1000
    assert T.master_copies(1000, 4, 4, deepspeed=False).bytes == 0


def test_layer_activations_match_the_saved_tensors_of_smollm2():
    s = shape_from_config(SMOLLM2)
    lora = {m: 16 for m in ALL7}
    # fp32, LoRA r=16 on all 7 linears, no dropout; H = q = 576, kv = 192, I = 1536, 9 heads:
    #   norms 2 x 4 H = 4,608; attention 4 x (2 q + 2 kv) + 4 x 9 = 6,180; MLP 4 x 3 I = 18,432;
    #   shared inputs: normed hidden twice 2 x 4 H = 4,608, MLP product 4 I = 6,144; LoRA A outputs 7 x 4 x 16 = 448
    # = 40,420 B per token and layer; saved_tensors_hooks measured 40,505 (the rest is outside the layers)
    per = T.layer_activation_bytes(576, s.q_dim, s.kv_dim, 9, 1536, 4, 4, lora_r=lora)
    assert per == 4608 + 6180 + 18432 + 4608 + 6144 + 448 == 40_420
    # with LoRA dropout on CPU each adapter keeps its own input and an fp32 noise mask instead of the shared input:
    # 5 x (4 + 4) H + (4 + 4) q + (4 + 4) I = 23,040 + 4,608 + 12,288 for the 10,752 of shared inputs (measured 69,458)
    drop = T.layer_activation_bytes(576, s.q_dim, s.kv_dim, 9, 1536, 4, 4, lora_r=lora, dropout=True, mask_b=4)
    assert drop == 40_420 - 10_752 + 23_040 + 4_608 + 12_288 == 69_604
    # bf16 weights under bf16 autocast, LoRA: PEFT's fp32 cast and autocast's bf16 copy per adapter (2 B x in)
    bf16 = T.layer_activation_bytes(576, s.q_dim, s.kv_dim, 9, 1536, 2, 2, lora_r=lora, autocast=True)
    # norms 4,608; attention 2 x 1,536 + 36 = 3,108; MLP 2 x 3 I = 9,216; copies 2 x (5 H + q + I) = 9,984;
    # A outputs 7 x 2 x 16 = 224 (measured under CPU bf16 autocast: 27,608 with the layers' outside share)
    assert bf16 == 4608 + 3108 + 9216 + 9984 + 224 == 27_140
    # a frozen, unadapted linear keeps nothing: without down_proj's adapter its input (the product) is not kept
    no_down = T.layer_activation_bytes(576, s.q_dim, s.kv_dim, 9, 1536, 4, 4, lora_r={m: 16 for m in ALL7[:-1]})
    assert per - no_down == 4 * 1536 + 4 * 16


def test_activations_with_and_without_checkpointing():
    # 1,000 tokens, 30 layers, 40,000 B per token and layer, H 576 fp32, 500 scored tokens
    tail = 1000 * (4 + 4) * 576 + 500 * 4 * 576
    assert T.activations(1000, 30, 40_000, 4, 576, False, 500, 4).bytes == 1000 * 30 * 40_000 + tail
    # checkpointing keeps each layer's input (4 B x H) and recomputes one layer in backward
    assert T.activations(1000, 30, 40_000, 4, 576, True, 500, 4).bytes == 1000 * 30 * 4 * 576 + 1000 * 40_000 + tail


def test_logits_kv_cache_and_sampling_terms():
    # TRL's fused head on CPU: a 752 x 32768 tile x (4 B + 8 fp32 temporaries) + the hidden grad 752 x 576 x 4 B
    assert T.fused_head(752, 49152, 576, 4, False, False).bytes == 752 * 32768 * 36 + 752 * 576 * 4
    # with Triton (CUDA): one bf16 tile of at most 4096 tokens; a trained LM head adds its fp32 gradient
    assert T.fused_head(10_000, 32000, 4096, 2, True,
                        True).bytes == 4096 * 32000 * 2 + 10_000 * 4096 * 4 + 32000 * 4096 * 4
    # whole logits: 8 rows x 40 x 49152 x 4 B + 5 fp32 copies of 8 x 8 scored positions x 49152
    assert T.full_logits(8, 40, 8, 49152, 4, 5).bytes == 8 * 40 * 49152 * 4 + 5 * 8 * 8 * 49152 * 4
    # Llama-2-7B, 8 rows of 1024 tokens in bf16: 2 x 32 layers x 4096 x 8 x 1024 x 2 B = 4 GiB
    assert T.kv_cache(32, 4096, 8, 1024, 2).bytes == 4 * GIB
    assert T.vllm_share(0.3, 80 * GIB, "colocate").bytes == 0.3 * 80 * GIB
    assert T.vllm_share(0.3, 80 * GIB, "server").bytes == 0


def _plan(stage, hw, *overrides, files=()):
    cfg, _, _ = load_config(stage, hw, list(files), list(overrides))
    return cfg, make_plan(cfg, load_shape(cfg.model.name_or_path, cfg.model.tiny_init_std))


def test_plan_of_the_grpo_demo_adds_its_phases_on_cpu():
    cfg, plan = _plan("grpo", "cpu", files=["configs/examples/grpo_demo.yaml"])
    assert plan.shape.num_params() == 115_392  # rlft's tiny model, as `rlft.tiny` builds it
    names = {t.name for t in plan.terms}
    assert {"runtime", "weights", "lora", "gradients", "optimizer", "master_copies", "activations", "logits",
            "kv_cache", "reference", "allocator"} <= names
    assert plan.term("reference").bytes == 0  # KL coefficient 0 in the demo
    phases = plan.phases
    assert plan.peak == pytest.approx(plan.persistent + phases["sampling"] + phases["training"])
    alloc = plan.term("allocator").bytes
    assert alloc == pytest.approx((T.CPU_ALLOCATOR_FACTOR - 1) * (phases["sampling"] + phases["training"]))
    # the KV cache: 2 x 2 layers x 64 x (2 prompts x 8 completions) x 512 tokens (train.max_seq_length) x 4 B
    assert plan.term("kv_cache").bytes == 2 * 2 * 64 * 16 * 512 * 4


def test_plan_on_a_gpu_takes_the_largest_phase_and_the_profile_memory():
    _, plan = _plan("grpo", "a100", "data.train=demo", "rewards=[{fn: char_fraction}]")
    assert plan.device_bytes == 80 * GIB and plan.fits is True
    assert plan.peak == pytest.approx(plan.persistent + max(plan.phases.values()))
    assert plan.term("weights").bytes == 115_392 * 2  # bf16 profile: weights load in bf16
    assert plan.term("lora").bytes == 34_816 * 4  # adapters stay fp32
    _, small = _plan("grpo", "a100", "data.train=demo", "rewards=[{fn: char_fraction}]", "hw.device_memory_gb=0.5")
    assert small.fits is False


def test_reference_and_sharding_per_strategy():
    _, lora = _plan("dpo", "a100")
    assert lora.term("reference").bytes == 0  # LoRA: the adapter-disabled policy
    _, full = _plan("dpo", "a100", "lora.enabled=false")
    assert full.term("reference").bytes == full.term("weights").bytes == 115_392 * 2
    assert full.term("gradients").bytes == 115_392 * 2 and full.term("lora") is None
    _, ddp = _plan("dpo", "ddp")
    assert ddp.term("ddp_buckets").bytes == ddp.term("gradients").bytes
    _, fsdp = _plan("dpo", "fsdp")
    assert fsdp.term("weights").bytes == 115_392 * 2 / 4
    assert fsdp.term("optimizer").bytes == T.optimizer_state("adamw_torch", 34_816, 4, []).bytes / 4
    _, ppo = _plan("ppo", "a100", "data.train=demo", "rewards=[{fn: char_fraction}]")
    assert ppo.term("value_head").bytes > 0 and ppo.term("rollout_logits").phase == T.SCORING


def test_vllm_colocate_share():
    cfg, _ = _plan("grpo", "a100", "data.train=demo", "rewards=[{fn: char_fraction}]")
    # validation wants vLLM installed for this backend; the plan needs only the keys
    cfg = with_overrides(cfg, {"grpo.generation_backend": "vllm", "trl.vllm_gpu_memory_utilization": 0.5})
    plan = make_plan(cfg, load_shape("tiny"))
    assert plan.term("vllm").bytes == 0.5 * 80 * GIB and plan.term("kv_cache") is None


def test_rlft_engine_counted_on_every_path_it_samples():
    """sampling.backend vllm: rlft's engine holds its own weights and KV cache (CPU) or its share (CUDA); where it
    samples training (PPO, RS-SFT, AWR, episodes) the generate terms go, beside single-turn GRPO (TRL samples
    training) they stay."""
    for stage, files in (("ppo", ["configs/examples/ppo_demo.yaml"]), ("awr", ["configs/examples/awr_demo.yaml"]),
                         ("rs_sft", ["configs/examples/rs_sft_demo.yaml"])):
        cfg, hf = _plan(stage, "cpu", files=files)
        cfg = with_overrides(cfg, {"sampling.backend": "vllm", "sampling.kv_cache_gib": 2})
        plan = make_plan(cfg, load_shape("tiny"))
        assert plan.term("vllm_engine").bytes == 115_392 * 4 + 2 * GIB, stage
        assert hf.term("kv_cache") is not None and plan.term("kv_cache") is None, stage
    cfg, _ = _plan("grpo", "cpu", files=["configs/examples/grpo_demo.yaml"])
    plan = make_plan(with_overrides(cfg, {"sampling.backend": "vllm"}), load_shape("tiny"))
    assert plan.term("vllm_engine").bytes == 115_392 * 4 + GIB and plan.term("kv_cache") is not None
    cfg, _ = _plan("ppo", "a100", "data.train=demo", "rewards=[{fn: char_fraction}]")
    plan = make_plan(with_overrides(cfg, {"sampling.backend": "vllm", "sampling.gpu_memory_utilization": 0.25}),
                     load_shape("tiny"))
    assert plan.term("vllm_engine").bytes == 0.25 * 80 * GIB
    cfg, _ = _plan("dpo", "cpu", files=["configs/examples/dpo_demo.yaml"])
    plan = make_plan(with_overrides(cfg, {"sampling.backend": "vllm"}), load_shape("tiny"))
    assert plan.term("vllm_engine") is None  # samples nothing


def test_levers_lower_the_peak_largest_saving_first():
    cfg, plan = _plan("grpo", "a100", "data.train=demo", "rewards=[{fn: char_fraction}]",
                      "train.per_device_train_batch_size=16")
    found = levers(cfg, plan)
    assert found and all(lv.peak < plan.peak for lv in found)
    assert [lv.peak for lv in found] == sorted(lv.peak for lv in found)
    by = {lv.what: lv for lv in found}
    assert by["activation checkpointing"].overrides == {"train.gradient_checkpointing": True}
    assert by["halve the micro-batch"].overrides == {"train.per_device_train_batch_size": 8}


def test_a_missing_config_json_names_the_places_looked(tmp_path):
    with pytest.raises(ShapeError, match="no config.json"):
        load_shape(str(tmp_path))
    with pytest.raises(ShapeError, match="not in the Hugging Face cache"):
        load_shape("nobody-here/no-such-model")


def test_cli_plan_text_and_json():
    res = run_cli("plan", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/grpo_demo.yaml")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "planned peak:" in out and "fits:" in out and "dominant:" in out and "what to change first" in out
    assert "train.gradient_checkpointing=true" in out
    res = run_cli("plan", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/grpo_demo.yaml", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert {"peak_gb", "terms", "device_gb", "fits"} <= set(data)
    assert data["fits"] is True and data["terms"]["runtime"] == pytest.approx(467 / 1024, abs=1e-3)


def test_cli_plan_without_config_json_is_one_line_exit_2(tmp_path):
    res = run_cli("plan", f"model.name_or_path={tmp_path}")
    assert res.returncode == 2
    lines = [x for x in res.stderr.splitlines() if x.startswith("error")]
    assert len(lines) == 1 and "model.name_or_path (command line)" in lines[0] and "config.json" in lines[0]
    assert "Traceback" not in res.stderr


def test_validate_config_warns_when_the_plan_does_not_fit():
    args = ("validate-config", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/grpo_demo.yaml")
    res = run_cli(*args, "hw.device_memory_gb=0.3")
    assert res.returncode == 0, res.stderr
    warning = [x for x in res.stderr.splitlines() if x.startswith("warning: hw.device_memory_gb")]
    # planned with the demo's prompts, as `rlft plan` plans them (0.7 GiB at the config's limits)
    assert len(warning) == 1 and "planned peak 0.5 GiB per device does not fit in 0.3 GiB for the longest rows of " \
        "demo (prompts of 26 + 16 sampled tokens)" in warning[0]
    assert "hw.device_memory_gb" not in run_cli(*args).stderr  # fits: no warning


# Qwen2.5-7B's config.json (the fields that shape it)
QWEN25_7B = {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
             "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "tie_word_embeddings": False}


def test_validate_config_plans_grpo_with_the_lengths_rlft_plan_uses(tmp_path):
    """The stock a100 profile with a 7B model and short prompts fits (rlft plan: ~31 GiB): validate-config
    plans the same prompt + grpo.max_tokens, not train.max_seq_length (8192: ~496 GiB, a false warning);
    a config that truly does not fit still warns, and without data both plan at the config's limits."""
    model = tmp_path / "qwen7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN25_7B))
    args = ("--stage", "grpo", "--hw", "a100", f"model.name_or_path={model}", "data.train=demo")
    res = run_cli("validate-config", *args)
    assert res.returncode == 0, res.stderr
    assert "hw.device_memory_gb" not in res.stderr
    plan = json.loads(run_cli("plan", *args, "--json").stdout)
    assert plan["fits"] and plan["basis"] == "data" and not plan["worst_case"]["fits"]

    res = run_cli("validate-config", *args, "grpo.max_tokens=4096")  # 4,096 sampled tokens: truly too much
    warning = [x for x in res.stderr.splitlines() if x.startswith("warning: hw.device_memory_gb")]
    assert res.returncode == 0 and len(warning) == 1, res.stderr
    assert "does not fit in 80.0 GiB for the longest rows of demo (prompts of 6 + 4096 sampled tokens)" in warning[0]

    res = run_cli("validate-config", *args[:-1])  # no data: the limits, as `rlft plan` plans them
    warning = [x for x in res.stderr.splitlines() if x.startswith("warning: hw.device_memory_gb")]
    assert len(warning) == 1 and "at the config's limits" in warning[0], res.stderr
    assert run_cli("validate-config", "--stage", "grpo", "--hw", "a100").stderr.count("hw.device_memory_gb") == 0


# ---- planning from the data's token lengths (rlft/plan/lengths.py)

# a word-level tokenizer: one token per whitespace-separated word, so token counts are word counts
WORDS = ["[UNK]", "user:", "assistant:", "system:", ";", "</s>", *"abcdefgh"]
# renders each message as "role: content ; " and the generation prompt as "assistant: "
WORD_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} ; {% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


def _word_model(folder, tokenizer=True, template=True):
    """A model folder with the tiny model's config.json and (optionally) a word-level tokenizer.json and
    its tokenizer_config.json with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from rlft.plan.model_shape import tiny_config

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_config(0.15)[0]))
    if tokenizer:
        tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.save(str(folder / "tokenizer.json"))
        config = {"eos_token": "</s>", **({"chat_template": WORD_TEMPLATE} if template else {})}
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


PROMPTS = [{"prompt": "a b c", "target": "a"}, {"prompt": "a b c d e f g", "target": "a"},
           {"prompt": "a", "target": "a"}]
# GRPO on a few rows: 2 prompts x 4 completions, one optimizer step per generation
GRPO_SMALL = ("rewards=[{fn: char_fraction}]", "grpo.batch_size=2", "grpo.num_substeps=1")


def _data_plan(stage, *overrides):
    from rlft.plan import plan_for

    cfg, _, _ = load_config(stage, "cpu", [], list(overrides))
    return cfg, plan_for(cfg, "cpu")


def test_prompt_lengths_come_from_the_models_tokenizer_and_chat_template(tmp_path):
    model, data = _word_model(tmp_path / "m"), _jsonl(tmp_path / "p.jsonl", PROMPTS)
    base = [f"model.name_or_path={model}", f"data.train={data}", *GRPO_SMALL, "grpo.max_tokens=16"]
    # chat template off: the longest prompt is its 7 words
    _, plan = _data_plan("grpo", *base, "data.chat_template=never")
    assert plan.basis == "data" and plan.data.tokenizer and plan.data.rows == 3 and not plan.data.sampled
    assert plan.data.lengths.prompts == (3, 7, 1)
    assert plan.tokens == {"prompt": 7, "completion": 16, "train_sequence": 23}
    # the cpu profile's train.max_seq_length 512: the limits would plan 496-token prompts
    assert "2 x 2 layers x 64 (kv heads x head dim) x 8 rows x 23 tokens" in plan.term("kv_cache").formula
    # auto with a template: "user: <7 words> ; assistant: " = 1 + 7 + 1 + 1 tokens
    _, plan = _data_plan("grpo", *base)
    assert plan.data.lengths.prompts == (6, 10, 4) and plan.data.template == "chat template applied"
    # data.system_prompt becomes a system message first: + "system: a ;" = 3 tokens
    _, plan = _data_plan("grpo", *base, "data.system_prompt=a")
    assert max(plan.data.lengths.prompts) == 13
    # capped by the prompt budget (train.max_seq_length - grpo.max_tokens), as data.too_long truncates
    _, plan = _data_plan("grpo", *base, "train.max_seq_length=24")
    assert plan.tokens["prompt"] == 8


def test_preference_pairs_are_counted_as_trl_tokenizes_them(tmp_path):
    model = _word_model(tmp_path / "m")
    data = _jsonl(tmp_path / "pairs.jsonl", [{"prompt": "a b c ", "chosen": "d e ", "rejected": "d "},
                                              {"prompt": "a ", "chosen": "b ", "rejected": "c "}])
    base = [f"model.name_or_path={model}", f"data.train={data}"]
    # plain text: TRL appends the EOS token to each answer; "a b c d e </s>" is the longest, 3 + 3 tokens
    _, plan = _data_plan("dpo", *base, "data.chat_template=never")
    assert plan.data.lengths.prompts == (3, 1) and plan.data.lengths.answers == (3, 2)
    assert plan.tokens == {"train_sequence": 6}
    # dpo.max_prompt_length keeps a prompt's last 2 tokens: 2 + 3
    _, plan = _data_plan("dpo", *base, "data.chat_template=never", "dpo.max_prompt_length=2")
    assert plan.tokens == {"train_sequence": 5}
    # chat template: "user: a b c ; assistant: " (6), then "d e ;" of "... assistant: d e ; " (3)
    _, plan = _data_plan("orpo", *base)
    assert plan.data.lengths.prompts == (6, 4) and plan.data.lengths.answers == (3, 2)
    assert plan.tokens == {"train_sequence": 9}


def test_without_a_tokenizer_the_lengths_are_a_stated_estimate(tmp_path):
    model = _word_model(tmp_path / "m", tokenizer=False)
    data = _jsonl(tmp_path / "p.jsonl", [{"prompt": "x" * 40, "target": "x"}, {"prompt": "x" * 10, "target": "x"}])
    _, plan = _data_plan("grpo", f"model.name_or_path={model}", f"data.train={data}", *GRPO_SMALL)
    # 40 characters / 4 per token; the chat template is unknown without the tokenizer's files
    assert plan.basis == "data" and not plan.data.tokenizer and plan.data.lengths.prompts == (10, 3)
    assert plan.data.counted.startswith("estimate: characters / 4") and "unknown" in plan.data.template


def test_plan_reads_a_bounded_number_of_rows(tmp_path, monkeypatch):
    from rlft.plan import lengths

    monkeypatch.setattr(lengths, "MAX_ROWS", 2)
    model, data = _word_model(tmp_path / "m"), _jsonl(tmp_path / "p.jsonl", PROMPTS)
    _, plan = _data_plan("grpo", f"model.name_or_path={model}", f"data.train={data}", *GRPO_SMALL,
                         "data.chat_template=never")
    assert plan.data.lengths.prompts == (3, 7) and plan.data.sampled
    assert "the first 2 of 3 rows" in plan.data.describe()


def test_cli_plan_prints_the_worst_case_and_json_names_the_basis(tmp_path):
    model, data = _word_model(tmp_path / "m"), _jsonl(tmp_path / "p.jsonl", PROMPTS)
    args = ("plan", "--stage", "grpo", "--hw", "cpu", f"model.name_or_path={model}", f"data.train={data}", *GRPO_SMALL,
            "data.chat_template=never")
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    peak = next(i for i, x in enumerate(lines) if x.startswith("planned peak:"))
    assert "basis: the data, prompts of 7 + 256 sampled tokens" in lines[peak]
    assert lines[peak + 1].startswith("worst case at the config's limits (prompts of 256 + 256 sampled tokens):")
    res = run_cli(*args, "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["basis"] == "data" and out["tokens"] == {"prompt": 7, "completion": 256, "train_sequence": 263}
    assert out["data"]["counted_with"] == "tokenizer" and out["data"]["statistic"] == "max"
    assert out["data"]["prompt_tokens"] == 7 and out["data"]["rows"] == 3 and out["data"]["sampled"] is False
    worst = out["worst_case"]
    assert worst["basis"] == "limits" and worst["tokens"]["prompt"] == 256 and worst["peak_gb"] > out["peak_gb"]


def test_plan_falls_back_to_the_limits_and_says_why():
    res = run_cli("plan", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/tool_use_grpo.yaml", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["basis"] == "limits" and "episodes" in out["limits_why"]
    assert out["worst_case"]["peak_gb"] == out["peak_gb"]


# ---- a damaged config.json (issue 35): one line naming the file and the field, exit 2; the cost is per layer once

# config.json texts written by hand: json.dumps cannot write 1e999, and the numbers stay as the user wrote them
SMOLLM2_TEXT = json.dumps(SMOLLM2)[:-1]
BAD_CONFIGS = {
    "a string count": (SMOLLM2_TEXT + ', "num_key_value_heads": "eight"}', 'num_key_value_heads is "eight"'),
    "1e999": (SMOLLM2_TEXT + ', "intermediate_size": 1e999}', "intermediate_size is Infinity"),
    "NaN": (SMOLLM2_TEXT + ', "hidden_size": NaN}', "hidden_size is NaN"),
    "a negative size": (SMOLLM2_TEXT + ', "intermediate_size": -11008}', "intermediate_size -11008 is out of range"),
    "true as a count": (SMOLLM2_TEXT + ', "num_attention_heads": true}', "num_attention_heads is true"),
    "a float count": (SMOLLM2_TEXT + ', "num_hidden_layers": 30.0}', "num_hidden_layers is 30.0"),
    "a huge layer count": (SMOLLM2_TEXT + ', "num_hidden_layers": 10000000}', "num_hidden_layers 10000000 is out of "
                                                                              "range"),
    "a string flag": (SMOLLM2_TEXT + ', "tie_word_embeddings": "false"}', 'tie_word_embeddings is "false"'),
    "text_config": ('{"model_type": "llava", "text_config": ' + SMOLLM2_TEXT + ', "num_hidden_layers": -1}}',
                    "text_config.num_hidden_layers -1 is out of range"),
    "zero-width heads": (SMOLLM2_TEXT.replace(', "head_dim": 64', "") + ', "num_attention_heads": 1024}',
                         "hidden_size 576 is smaller than num_attention_heads 1024"),
}


def _model_folder(folder, text):
    folder.mkdir()
    (folder / "config.json").write_text(text)
    return folder


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_damaged_config_json_is_a_shape_error_naming_file_and_field(tmp_path, case):
    from rlft.plan.model_shape import DamagedConfig

    text, message = BAD_CONFIGS[case]
    folder = _model_folder(tmp_path / "m", text)
    with pytest.raises(DamagedConfig) as exc:
        load_shape(str(folder))
    assert str(folder / "config.json") in str(exc.value) and message in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("case", ["a string count", "1e999", "a negative size", "true as a count",
                                  "a huge layer count"])
def test_cli_plan_and_validate_config_on_a_damaged_config_json(tmp_path, case):
    text, message = BAD_CONFIGS[case]
    folder = _model_folder(tmp_path / "m", text)
    args = ("--stage", "grpo", "--hw", "cpu", f"model.name_or_path={folder}")
    res = run_cli("plan", *args)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.startswith("error")]
    assert len(lines) == 1 and lines[0].startswith("error: model.name_or_path (command line): ")
    assert str(folder / "config.json") in lines[0] and message in lines[0]
    # validate-config: the memory check skipped with one warning naming the same problem; the config itself is fine
    res = run_cli("validate-config", *args)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    lines = [x for x in res.stderr.splitlines() if "memory not planned" in x]
    assert len(lines) == 1 and lines[0].startswith("warning: model.name_or_path (command line): ")
    assert str(folder / "config.json") in lines[0] and message in lines[0]
    assert "config OK" in res.stdout


def test_a_layer_count_at_the_bound_plans():
    from rlft.models.config_json import SIZE_FIELDS

    most = SIZE_FIELDS["num_hidden_layers"][1]
    shape = shape_from_config({**SMOLLM2, "num_hidden_layers": most})
    assert shape.num_layers == most
    with pytest.raises(ShapeError, match="num_hidden_layers"):
        shape_from_config({**SMOLLM2, "num_hidden_layers": most + 1})


def test_the_plans_cost_does_not_grow_with_the_layer_count():
    import time
    from dataclasses import replace

    # ModelShape built directly, past the config.json bound: a million layers, every per-layer sum in play
    # (full fine-tuning with Adafactor: one factored state per matrix; LoRA: its matrices)
    shape = replace(shape_from_config(SMOLLM2), num_layers=10**6)
    assert len(shape.matrices()) <= 10 and len(shape.lora(ALL7, 16)[1]) <= 2 * len(ALL7)
    start = time.perf_counter()
    for overrides in (["lora.enabled=false", "train.optim=adafactor"], ["lora.enabled=true", "train.optim=adafactor"],
                      ["lora.enabled=false"]):
        cfg, _, _ = load_config("grpo", "cpu", [], ["rewards=[{fn: char_fraction}]", *overrides])
        plan = make_plan(cfg, shape)
        assert plan.peak > 0
    assert time.perf_counter() - start < 5


def test_per_layer_sums_equal_the_layer_by_layer_count():
    s = shape_from_config(SMOLLM2)
    # SmolLM2 layer by layer: Adafactor keeps rows + cols of each matrix, rows of each vector
    per_layer = sum(n_out + n_in for n_in, n_out, k in s.linears().values() for _ in range(k)) + 2 * 576
    expected = (49152 + 576) + 30 * per_layer + 576
    n = sum(r * c * k for r, c, k in s.matrices())
    assert n == s.num_params()
    assert T.optimizer_state("adafactor", n, 4, s.matrices()).bytes == expected * 4
    n_lora, mats, _, _ = s.lora(ALL7, 16)
    assert n_lora == sum(r * c * k for r, c, k in mats) == 4_884_480


def test_a_chat_template_that_loops_for_ever_is_stopped_and_the_limits_plan(tmp_path):
    """Two nested range(100000) loops (the sandbox stops attribute escapes, not loops) ran until killed."""
    import time

    model, data = _word_model(tmp_path / "m"), _jsonl(tmp_path / "p.jsonl", PROMPTS)
    loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}" + WORD_TEMPLATE
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": loops}))
    started = time.monotonic()
    _, plan = _data_plan("grpo", f"model.name_or_path={model}", f"data.train={data}", *GRPO_SMALL)
    assert time.monotonic() - started < 10
    assert plan.basis != "data" and "loops ran past" in plan.limits_why, plan.limits_why


def test_a_huge_prompt_row_is_cut_before_tokenising(tmp_path):
    """A 10 MB row took 33 s and 3 GB; the plan caps a prompt at train.max_seq_length anyway."""
    import time

    from rlft.plan.lengths import CUT_CHARS_PER_TOKEN, TokenCounter

    model = _word_model(tmp_path / "m")
    data = _jsonl(tmp_path / "p.jsonl", [*PROMPTS, {"prompt": "a " * 5_000_000, "target": "a"}])
    seen, encode = [], TokenCounter.encode

    def spy(self, texts, special_tokens):
        seen.extend(len(t) for t in texts)
        return encode(self, texts, special_tokens)

    started = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TokenCounter, "encode", spy)
        _, plan = _data_plan("grpo", f"model.name_or_path={model}", f"data.train={data}", *GRPO_SMALL,
                             "grpo.max_tokens=16")
    assert time.monotonic() - started < 10
    assert max(seen) <= 512 * CUT_CHARS_PER_TOKEN + 64, max(seen)  # the cut row and the template's words
    assert plan.basis == "data" and max(plan.data.lengths.prompts) > 512 - 16  # still longer than the budget
