"""The reward-model stage end to end through the CLI on the built-in tiny model (CPU): the demo's held-out pairwise
accuracy rises, the metrics carry TRL's pairwise numbers, and final/ is a merged sequence classifier that plain
transformers loads outside rlft."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT, read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/rm_demo.yaml"

SCORE_OUTSIDE_RLFT = """
import json, sys
from transformers import AutoModelForSequenceClassification, AutoTokenizer
final = sys.argv[1]
tok = AutoTokenizer.from_pretrained(final)
model = AutoModelForSequenceClassification.from_pretrained(final).eval()
def score(answer):
    text = tok.apply_chat_template([{"role": "user", "content": "Repeat the letter z: "},
                                    {"role": "assistant", "content": answer}], tokenize=False)
    return model(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item()
print(json.dumps({"cls": type(model).__name__, "pad": model.config.pad_token_id, "labels": model.config.num_labels,
                  "good": score("zzzzzzzz"), "bad": score("qqqqqqqq")}))
"""


@pytest.fixture(scope="module")
def rm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("rm") / "run"
    res = run_cli("train", "--stage", "rm", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    return out, res


def test_rm_demo_learns(rm_run):
    out, res = rm_run
    ev = json.loads((out / "summary.json").read_text())["eval"]
    assert ev["start"]["pairs"] == "data.eval" and ev["start"]["n"] == 32
    # the untrained head is a coin with a bias; the trained one separates the held-out pairs. Thresholds below the
    # worst of 3 seeds x 2 CPU kernels (scripts/bench_demos.py --demos rm, docs/benchmarks.md)
    assert ev["end"]["pairwise_accuracy"] >= 0.85 > ev["start"]["pairwise_accuracy"]
    assert ev["end"]["reward_margin"] > ev["start"]["reward_margin"] + 1.0
    assert ev["end"]["loss"] < ev["start"]["loss"]
    assert "pairwise accuracy" in res.stderr


def test_rm_metrics_carry_pairwise_numbers(rm_run):
    out, _ = rm_run
    rows = read_jsonl(out / "metrics.jsonl")
    train = [r for r in rows if r.get("accuracy") is not None]
    assert len(train) >= 20 and all({"loss", "margin", "mean_reward"} <= set(r) for r in train)
    held = [r for r in rows if r.get("eval_accuracy") is not None]
    assert held and held[-1]["eval_accuracy"] >= 0.85  # TRL's own eval on data.eval every train.eval_steps
    assert sum(r["accuracy"] for r in train[-5:]) / 5 > sum(r["accuracy"] for r in train[:3]) / 3


def test_rm_final_loads_outside_rlft(rm_run):
    out, _ = rm_run
    final = out / "final"
    assert (final / "config.json").is_file() and not (final / "adapter_config.json").exists()  # merged
    assert json.loads((final / "config.json").read_text())["architectures"][0].endswith("ForSequenceClassification")
    res = subprocess.run([sys.executable, "-c", SCORE_OUTSIDE_RLFT, str(final)], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["cls"].endswith("ForSequenceClassification") and got["labels"] == 1
    assert got["pad"] is not None  # the classifier finds each row's last token by it
    assert got["good"] > got["bad"]


def test_rm_refuses_prompt_only_data(tmp_path):
    res = run_cli("validate-config", "--stage", "rm", "--hw", "cpu", "data.train=demo")
    assert res.returncode == 2 and "data.train" in res.stderr and "preference pairs" in res.stderr
