"""`rlft eval`, `rlft generate` and `rlft export` on a short GRPO demo run, through the CLI."""

from __future__ import annotations

import json

import pytest

from conftest import read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("posttrain") / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                  "train.max_steps=4", "train.save_steps=2")
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_eval_scores_fresh_samples_with_the_runs_rewards(run, tmp_path):
    res = run_cli("eval", run, "--data", "demo", "-n", "3", "--max-prompts", "5")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "5 prompts x 3 = 15 completions" in res.stdout and "char_fraction" in res.stdout
    assert "has no effect" not in res.stderr  # the run's other stage sections are not re-applied
    rows = read_jsonl(run / "eval.jsonl")
    assert len(rows) == 15 and {r["prompt_id"] for r in rows} == set(range(5))
    assert all(set(r["rewards"]) == {"char_fraction"} and r["total"] == r["rewards"]["char_fraction"] for r in rows)
    mean = sum(r["total"] for r in rows) / 15
    assert f"{mean:.4f}" in res.stdout
    # same seed, same samples; a checkpoint is evaluated on request
    again = run_cli("eval", run, "--data", "demo", "-n", "3", "--max-prompts", "5", "-o", tmp_path / "again.jsonl")
    assert again.returncode == 0, again.stderr[-2000:]
    assert [r["completion"] for r in read_jsonl(tmp_path / "again.jsonl")] == [r["completion"] for r in rows]
    ckpt = run_cli("eval", run, "--checkpoint", "2", "--data", "demo", "-n", "1", "--max-prompts", "2",
                   "-o", tmp_path / "ckpt.jsonl")
    assert ckpt.returncode == 0, ckpt.stderr[-2000:]
    assert "checkpoint-2" in ckpt.stdout and {r["step"] for r in read_jsonl(tmp_path / "ckpt.jsonl")} == {2}


def test_eval_and_generate_errors(run, tmp_path):
    no_data = run_cli("eval", run)
    assert no_data.returncode == 2 and "set data.eval" in no_data.stderr
    missing = run_cli("eval", run, "--checkpoint", "99", "--data", "demo")
    assert missing.returncode == 2 and "this run has: 2, 4" in missing.stderr
    nothing = run_cli("generate", run)
    assert nothing.returncode == 2 and "--prompt" in nothing.stderr
    bad = run_cli("export", tmp_path / "nope", "-o", tmp_path / "x")
    assert bad.returncode == 2 and "no such run" in bad.stderr
    for res in (no_data, missing, nothing, bad):
        assert "Traceback" not in res.stderr


def test_eval_n_with_greedy_is_refused_as_validate_config_refuses_it(run):
    """-n goes around eval.samples_per_prompt: the run has no `eval:` section, greedy comes from the command line."""
    res = run_cli("eval", run, "--data", "demo", "-n", "4", "eval.greedy=true")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: -n (command line): 4 samples per prompt with eval.greedy")
    assert "greedy decoding draws the same completion every time" in lines[0]
    assert run_cli("eval", run, "--data", "demo", "-n", "1", "--max-prompts", "1", "eval.greedy=true",
                   "-o", run.parent / "greedy.jsonl").returncode == 0


def test_generate(run, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Write z many times:\n\n")
    res = run_cli("generate", run, "-p", "Repeat the letter z:", "--file", prompts, "-n", "2", "--max-tokens", "8")
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert lines.count("=== Repeat the letter z:") == 1 and lines.count("=== Write z many times:") == 1
    assert sum(line.startswith("--- ") for line in lines) == 4


def test_export_merged_and_adapter(run, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged_dir, adapter_dir = tmp_path / "merged", tmp_path / "adapter"
    res = run_cli("export", run, "--merge", "-o", merged_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    res = run_cli("export", run, "-o", adapter_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "tiny"  # by the name the run gave, not this machine's cache path
    for folder in (merged_dir, adapter_dir):
        for f in folder.iterdir():
            if f.suffix in (".json", ".md", ".jinja"):
                assert "/.cache/" not in f.read_text(), f
    again = run_cli("export", run, "-o", adapter_dir)
    assert again.returncode == 2 and "not empty" in again.stderr

    # the merged model computes what the adapter on its base computes
    base_path = json.loads((run / "final" / "adapter_config.json").read_text())["base_model_name_or_path"]
    if base_path == "tiny":  # rlft's built-in model, named as the user gave it: rebuild it as the run did
        import yaml

        from rlft.tiny import ensure_tiny_model

        std = yaml.safe_load((run / "config.yaml").read_text())["model"]["tiny_init_std"]
        base_path = str(ensure_tiny_model(init_std=std))
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), str(run / "final")).eval()
    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir)).eval()
    ids = torch.tensor([[1, 5, 9, 42, 7]])
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, peft_model(ids).logits, atol=1e-5, rtol=1e-4)


def test_eval_checks_reward_columns_and_prompt_length(run, tmp_path):
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps({"prompt": "Repeat the letter z:", "target": "z"}) + "\n"
                    + json.dumps({"prompt": "x " * 50_000 + "Repeat z:", "target": "z"}) + "\n")
    res = run_cli("eval", run, "--data", data, "-n", "1", "-o", tmp_path / "e.jsonl", "train.max_seq_length=64")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "1 prompt(s) longer than 48 tokens" in res.stderr and "2 prompts x 1 = 2 completions" in res.stdout
    res = run_cli("eval", run, "--data", data, "-n", "1", "-o", tmp_path / "e.jsonl", "train.max_seq_length=64",
                  "data.too_long=error", "--force")
    assert res.returncode == 2 and "longer than 48 tokens" in res.stderr and "Traceback" not in res.stderr
    nocol = tmp_path / "nocol.jsonl"
    nocol.write_text(json.dumps({"prompt": "Repeat the letter z:"}) + "\n")
    res = run_cli("eval", run, "--data", nocol, "-n", "1", "-o", tmp_path / "e.jsonl", "--force")
    assert res.returncode == 2 and "reads column 'target'" in res.stderr and "Traceback" not in res.stderr


def test_eval_reproduces_the_runs_final_eval_and_scores_eval_only_rewards(tmp_path):
    """`rlft eval` seeds and splits its sampling as the run's own evaluation (train.seed + eval's offset, the run's
    eval batch size), so the final model on the run's eval prompts and settings gives eval.end's numbers, and it
    scores `eval.rewards` on its samples, reported under the training eval's names and never in the total."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", "train.max_steps=2",
                  "data.eval_prompts=4", "eval.rewards=[{fn: char_fraction, name: y_share, kwargs: {char: y}}]")
    assert res.returncode == 0, res.stderr[-3000:]
    end = json.loads((out / "summary.json").read_text())["eval"]["end"]
    assert set(end["per_reward"]) == {"char_fraction", "y_share"}, end
    res = run_cli("eval", out, "--data", "demo", "-n", "8", "--max-prompts", "4")  # GRPO's eval: group_size samples
    assert res.returncode == 0, res.stderr[-3000:]
    logged = next(x for x in res.stdout.splitlines() if x.startswith("as training logs it: "))
    for name, value in [("eval_reward", end["reward_mean"]), ("eval_pass_at_k", end["pass_at_k"]),
                        ("eval_prompt_std", end["prompt_std"]), ("eval_rewards/y_share", end["per_reward"]["y_share"]),
                        ("eval_rewards/char_fraction", end["per_reward"]["char_fraction"]),
                        ("eval_rewards/y_share/errors", 0)]:
        assert f"{name} {value}," in logged + ",", (name, value, logged)
    assert "the run's own final eval (same prompts, rewards and sampling)" in res.stdout, res.stdout
    shown = res.stdout.split("eval-only rewards (eval.rewards")[1]
    assert "y_share" in shown and "y_share" not in res.stdout.split("eval-only rewards")[0]
    rows = read_jsonl(out / "eval.jsonl")
    assert len(rows) == 32 and all(set(r["rewards"]) == {"char_fraction", "y_share"} for r in rows)
    assert all(r["total"] == r["rewards"]["char_fraction"] for r in rows)  # the eval-only reward is not in the total
    # another seed draws other samples, so no claim to be the run's numbers
    other = run_cli("eval", out, "--data", "demo", "-n", "8", "--max-prompts", "4", "--seed", "5", "-o",
                    tmp_path / "other.jsonl")
    assert other.returncode == 0, other.stderr[-3000:]
    assert "the run's own final eval" not in other.stdout
    assert [r["completion"] for r in read_jsonl(tmp_path / "other.jsonl")] != [r["completion"] for r in rows]


def test_ppo_eval_with_n_above_1_reports_its_spread_and_rlft_eval_gives_its_numbers(tmp_path):
    """PPO's eval with eval.samples_per_prompt 4: pass@4 and the spread over prompts in every eval row and in
    summary.json, and `rlft eval` (the run's own eval section: 4 samples) on its final model gives eval.end."""
    out = tmp_path / "ppo"
    res = run_cli("train", "--stage", "ppo", "--hw", "cpu", "-c", "configs/examples/ppo_demo.yaml",
                  f"train.output_dir={out}", "ppo.num_episodes=32", "ppo.eval_interval=16", "ppo.save_interval=32",
                  "data.eval_prompts=4", "eval.samples_per_prompt=4")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "eval_reward" in r]
    assert rows and all(r["eval_prompt_std"] is not None and 0 <= r["eval_pass_at_k"] <= 1 for r in rows), rows
    end = json.loads((out / "summary.json").read_text())["eval"]["end"]
    assert (end["k"], end["n"], end["sampling"]["n"]) == (4, 16, 4) and end["prompt_std"] is not None, end
    res = run_cli("eval", out, "--data", "demo", "--max-prompts", "4")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "4 prompts x 4 = 16 completions" in res.stdout, res.stdout
    logged = next(x for x in res.stdout.splitlines() if x.startswith("as training logs it: ")) + ","
    for name, key in (("eval_reward", "reward_mean"), ("eval_pass_at_k", "pass_at_k"),
                      ("eval_prompt_std", "prompt_std")):
        assert f"{name} {end[key]}," in logged, (name, end, logged)
