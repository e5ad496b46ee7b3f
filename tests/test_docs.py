"""The manual's generated references (docs/reference/, written by `python -m rlft.docs`) match the code: every
schema key is in config.md, every command in cli.md, and a page edited by hand or left behind by a code change
fails here. Also `rlft keys`, which prints from the same schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from rlft.cli import app
from rlft.config.keys import all_keys, closest, matching
from rlft.config.metric_docs import CONDITIONAL, METRICS, PATTERNS, ROW_KEYS, describe
from rlft.config.stages import SPECS
from rlft.docs import generate, stale
from rlft.docs.generate import cli_commands

ROOT = Path(__file__).resolve().parents[1]
FIX = "run `python -m rlft.docs` and commit the pages"


def test_generated_pages_are_up_to_date():
    assert stale(ROOT) == [], f"stale generated docs: {FIX}"


def test_stale_check_catches_a_hand_edit(tmp_path):
    for path, text in generate().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert stale(tmp_path) == []
    page = tmp_path / "docs/reference/config.md"
    page.write_text(page.read_text().replace("`grpo.group_size`", "`grpo.group_sz`"))
    assert stale(tmp_path) == ["docs/reference/config.md"]
    proc = subprocess.run([sys.executable, "-m", "rlft.docs", "--check", "--root", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and "docs/reference/config.md" in proc.stderr


def test_every_schema_key_is_in_config_reference():
    text = (ROOT / "docs/reference/config.md").read_text()
    keys = all_keys()
    assert "grpo.kl_penalty_coef" in keys and "rewards[].fn" in keys and "slurm.time" in keys
    missing = [k for k in keys if f"| `{k}` |" not in text]
    assert not missing, f"keys missing from docs/reference/config.md: {missing[:10]} ({FIX})"


def test_every_command_is_in_cli_reference():
    text = (ROOT / "docs/reference/cli.md").read_text()
    commands = cli_commands()
    assert {"rlft train", "rlft keys", "rlft rewards try", "rlft pipeline run"} <= set(commands)
    missing = [c for c in commands if f"\n## {c}\n" not in text]
    assert not missing, f"commands missing from docs/reference/cli.md: {missing} ({FIX})"
    assert "`--dry-run`" in text and "`--allow-config-change`" in text


def test_every_stage_metric_is_in_metrics_reference():
    text = (ROOT / "docs/reference/metrics.md").read_text()
    for spec in SPECS.values():
        assert f"\n## {spec.name}\n" in text
        assert all(f"| `{m}` | " in text for m in spec.metrics)


def test_every_stage_metric_has_a_meaning_and_unit():
    """A metric added to a StageSpec without an entry in rlft/config/metric_docs.py fails here."""
    missing = [f"{spec.name}: {m}" for spec in SPECS.values() for m in spec.metrics
               if not all(part.strip() for part in (describe(m, spec.name) or ("", "")))]
    assert not missing, f"metrics without a meaning and unit in rlft/config/metric_docs.py: {missing}"
    assert describe("no_such_metric", "grpo") is None


def test_metric_docs_hold_no_stale_or_empty_entries():
    listed = {m for spec in SPECS.values() for m in spec.metrics}
    assert set(METRICS) <= listed, f"described but logged by no stage: {sorted(set(METRICS) - listed)}"
    own_tables = {stage: spec.metric_meanings for stage, spec in SPECS.items()}
    for stage, own in own_tables.items():
        assert set(own) <= set(SPECS[stage].metrics), (stage, sorted(own))
    for table in (METRICS, ROW_KEYS, PATTERNS, CONDITIONAL, *own_tables.values()):
        assert all(meaning.strip() and unit.strip() for meaning, unit in table.values())
    assert not set(CONDITIONAL) & listed, "a key every row carries belongs in its StageSpec's metrics"


def test_metric_patterns_and_stage_meanings():
    assert describe("rewards/format/mean", "grpo") == PATTERNS["rewards/<name>/mean"]
    assert describe("rewards/format/errors") == PATTERNS["rewards/<name>/errors"]
    assert describe("eval_rewards/format") == PATTERNS["eval_rewards/<name>"]
    assert describe("rewards/a/b/mean") is None
    assert describe("logps/chosen", "orpo") != describe("logps/chosen", "dpo")  # per-token mean vs sum
    assert describe("step") == ROW_KEYS["step"]


def test_keys_prefix_lists_matching_keys():
    res = CliRunner().invoke(app, ["keys", "grpo.kl"])
    assert res.exit_code == 0, res.output
    listed = [line.split()[0] for line in res.output.splitlines() if line and not line.startswith(" ")]
    assert listed == [k.path for k in matching("grpo.kl")] and "grpo.kl_penalty_coef" in listed
    assert all(k.startswith("grpo.kl") for k in listed)
    assert "allowed: a number between 0 and 10" in res.output  # FieldSpec.allowed()


def test_keys_shows_type_default_and_choices():
    res = CliRunner().invoke(app, ["keys", "model.init_mode"])
    assert res.exit_code == 0
    assert "model.init_mode  (string, default merge; all stages)" in res.output
    assert "one of merge, continue" in res.output


def test_keys_without_prefix_lists_every_key():
    res = CliRunner().invoke(app, ["keys"])
    listed = [line.split()[0] for line in res.output.splitlines() if line and not line.startswith(" ")]
    assert listed == list(all_keys())


def test_keys_unknown_prefix_exits_2_with_closest():
    res = CliRunner().invoke(app, ["keys", "grpo.klx"])
    assert res.exit_code == 2
    assert "no config key starts with `grpo.klx`" in res.output and "grpo.kl_penalty_coef" in res.output
    assert closest("lora.alpah")[0] == "lora.lora_alpha" or "lora.lora_alpha" in closest("lora.alpah")


def test_keys_with_a_prefix_longer_than_any_key_is_refused_at_once_without_echoing_it():
    """95,000 characters took 63 s (difflib against every key) and echoed the whole prefix."""
    import time

    started = time.monotonic()
    res = CliRunner().invoke(app, ["keys", "grpo." + "x" * 95_000])
    assert time.monotonic() - started < 2.0
    assert res.exit_code == 2 and len(res.output) < 300, res.output[:400]
    assert "no config key starts with `grpo.xxx" in res.output and "95,005 characters" in res.output


def test_the_generator_never_writes_through_a_link_out_of_the_tree(tmp_path):
    """A page that is a symbolic link (here to a file outside the tree) is refused, and nothing is written through
    it; a reference folder that is itself a link out of the tree likewise."""
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    root = tmp_path / "repo"
    (root / "docs" / "reference").mkdir(parents=True)
    (root / "docs" / "reference" / "config.md").symlink_to(outside)
    proc = subprocess.run([sys.executable, "-m", "rlft.docs", "--root", str(root)], capture_output=True, text=True)
    assert proc.returncode == 2 and "docs/reference/config.md" in proc.stderr and "link" in proc.stderr, proc.stderr
    assert outside.read_text() == "mine\n" and not (root / "docs" / "reference" / "cli.md").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "docs" / "reference" / "config.md").unlink()
    (root / "docs" / "reference").rmdir()
    (root / "docs" / "reference").symlink_to(elsewhere, target_is_directory=True)
    proc = subprocess.run([sys.executable, "-m", "rlft.docs", "--root", str(root)], capture_output=True, text=True)
    assert proc.returncode == 2 and list(elsewhere.iterdir()) == [], proc.stderr
