"""What a stage really writes to metrics.jsonl is documented: a short run of each stage's demo config on the
built-in tiny model, through the CLI, and every key of every row must be listed for that stage in
docs/reference/metrics.md (its table, generated from the StageSpec) or in the sections every stage shares (keys
every row carries, patterns such as `rewards/<name>/mean`, where `<name>` stands for any name without a slash,
and keys some settings add). tests/test_docs.py checks the other direction: every StageSpec metric is on the page."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT, read_jsonl, run_cli
from rlft.config.stages import SPECS

pytestmark = pytest.mark.e2e

FIX = ("add it to the stage's StageSpec.metrics (rlft/stages/<stage>/spec.py, shared tuples in "
       "rlft/config/stagespec.py) and run `python -m rlft.docs`")

# A few seconds each on a CPU: the fewest steps, samples and rounds that still log a training row.
SHORT = {
    "grpo": ["train.max_steps=2", "data.eval_prompts=0"],
    "ppo": ["ppo.num_episodes=32", "ppo.eval_interval=100000", "ppo.save_interval=100000", "data.eval_prompts=0"],
    "dpo": ["train.max_steps=2"],
    "orpo": ["train.max_steps=2"],
    "rm": ["train.max_steps=2", "train.eval_steps=1"],
    "rs_sft": ["rs_sft.rounds=1", "rs_sft.num_samples_per_prompt=2", "data.max_samples=8", "data.eval_prompts=0",
               "train.num_train_epochs=1"],
    "awr": ["awr.rounds=1", "awr.num_samples_per_prompt=2", "data.max_samples=8", "data.eval_prompts=0",
            "train.num_train_epochs=1"],
}


def _table_names(body: str) -> list[str]:
    """The metric names of a section's tables: the code span that opens each row (`| `name` | meaning | unit |`)."""
    return re.findall(r"^\| `([^`]+)` \|", body, re.M)


def _as_pattern(name: str) -> re.Pattern:
    """`rewards/<name>/mean` -> a regex where each <placeholder> is one path segment."""
    return re.compile("".join("[^/]+" if part.startswith("<") else re.escape(part)
                              for part in re.split(r"(<[^>/]+>)", name)) + r"\Z")


SHARED = ("Every row", "Per-reward and evaluation keys", "Keys some settings add")


def documented(stage: str) -> list[re.Pattern]:
    """The metric names docs/reference/metrics.md gives `stage`: its own table and the sections every stage shares
    (keys every row carries, per-reward patterns, keys some settings add)."""
    text = (ROOT / "docs/reference/metrics.md").read_text()
    sections = dict(part.split("\n", 1) for part in text.split("\n## ")[1:] if "\n" in part)
    assert stage in sections, f"no `## {stage}` section in docs/reference/metrics.md"
    names = _table_names(sections[stage])
    assert names, f"no metric table in the {stage} section of docs/reference/metrics.md"
    shared = [n for title in SHARED for n in _table_names(sections.get(title, ""))]
    return [_as_pattern(name) for name in shared + names]


def test_documented_patterns_match_placeholders_only():
    names = documented("grpo")
    assert any(p.match("rewards/char_fraction/mean") for p in names)
    assert not any(p.match("rewards/a/b/mean") for p in names)  # a placeholder is one segment
    assert any(p.match("step") for p in names) and not any(p.match("stepx") for p in names)


@pytest.mark.parametrize("stage", list(SHORT))
def test_every_logged_metric_is_documented(stage, tmp_path):
    assert set(SHORT) == set(SPECS), "a stage without a short run here: add its demo config's overrides to SHORT"
    out = tmp_path / stage
    proc = run_cli("train", "--stage", stage, "--hw", "cpu", "-c", f"configs/examples/{stage}_demo.yaml",
                   *SHORT[stage], f"train.output_dir={out}", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert rows and all(row["stage"] == stage for row in rows)
    names = documented(stage)
    logged = sorted({key for row in rows for key in row})
    missing = [key for key in logged if not any(p.match(key) for p in names)]
    assert not missing, f"{stage} logs metrics not in docs/reference/metrics.md: {missing}; {FIX}"
