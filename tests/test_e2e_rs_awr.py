"""End-to-end RS-SFT and AWR runs through the CLI on the built-in tiny model (CPU): the demos learn,
samples.jsonl / metrics / summary, resume after a kill while sampling and while training, the
nothing-kept stop."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from conftest import ROOT, read_jsonl, run_cli

pytestmark = pytest.mark.e2e
RS_DEMO = "configs/examples/rs_sft_demo.yaml"
AWR_DEMO = "configs/examples/awr_demo.yaml"
# a small, fast variant of a demo for the lifecycle tests
SMALL = ["data.max_samples=8", "data.eval_prompts=4", "train.num_train_epochs=1", "train.per_device_train_batch_size=8"]


def _train(stage, demo, out, *extra, faults=None, resume=False):
    args = ["train", "--stage", stage, "--hw", "cpu", "-c", demo, f"train.output_dir={out}", *extra]
    return run_cli(*args, *(["--resume"] if resume else []), faults=faults)


def _summary(out):
    return json.loads((out / "summary.json").read_text())


def _check_steps(rows):
    steps = [r["step"] for r in rows]
    assert steps == list(range(1, len(steps) + 1)), steps  # counted over all rounds, nothing repeated


def test_rs_sft_demo_learns(tmp_path):
    out = tmp_path / "run"
    res = _train("rs_sft", RS_DEMO, out)
    assert res.returncode == 0, res.stderr[-3000:]
    s = _summary(out)
    start, end = s["eval"]["start"]["reward_mean"], s["eval"]["end"]["reward_mean"]
    print(f"rs_sft demo: eval.start {start}, eval.end {end}, wall {s['wall_s']} s, steps {s['steps']}")
    assert s["status"] == "finished" and s["eval"]["start"]["n"] == s["eval"]["end"]["n"] == 16 * 8
    assert start < 0.1 and end > start + 0.3, (start, end)

    samples = read_jsonl(out / "samples.jsonl")
    assert Counter(r["round"] for r in samples) == {r: 32 * 8 for r in range(1, 9)}
    for row in samples:
        assert set(row) >= {"round", "prompt_id", "sample", "prompt", "completion", "rewards", "total", "kept"}
        assert row["kept"] is False or row["total"] > 0.0
    kept_per_prompt = Counter((r["round"], r["prompt_id"]) for r in samples if r["kept"])
    assert max(kept_per_prompt.values()) == 1  # keep: best
    metrics = read_jsonl(out / "metrics.jsonl")
    _check_steps(metrics)
    assert s["steps"] == len(metrics)
    for key in ("round", "sampled_reward_mean", "sampled_reward_std", "kept_fraction", "kept_count", "loss"):
        assert all(m[key] is not None for m in metrics), key
    by_round = {m["round"]: m for m in metrics}
    assert sorted(by_round) == list(range(1, 9))
    for r, m in by_round.items():
        kept = [x for x in samples if x["round"] == r and x["kept"]]
        assert m["kept_count"] == len(kept) and m["kept_fraction"] == pytest.approx(len(kept) / 256)
    assert by_round[8]["sampled_reward_mean"] > by_round[1]["sampled_reward_mean"]
    comps = read_jsonl(out / "completions.jsonl")
    assert len(comps) == 8 * 4 and all("kept" in c and "round" in c for c in comps)  # log_completions 4 per round
    assert (out / "final" / "adapter_config.json").is_file()
    assert (out / "checkpoints" / "round-1" / "adapter" / "adapter_config.json").is_file()
    assert not list((out / "checkpoints" / "round-1").glob("checkpoint-*"))  # done rounds keep their adapter only


def test_awr_demo_learns(tmp_path):
    out = tmp_path / "run"
    res = _train("awr", AWR_DEMO, out)
    assert res.returncode == 0, res.stderr[-3000:]
    s = _summary(out)
    start, end = s["eval"]["start"]["reward_mean"], s["eval"]["end"]["reward_mean"]
    print(f"awr demo: eval.start {start}, eval.end {end}, wall {s['wall_s']} s, steps {s['steps']}")
    assert s["status"] == "finished" and start < 0.1 and end > start + 0.2, (start, end)

    samples = read_jsonl(out / "samples.jsonl")
    assert Counter(r["round"] for r in samples) == {r: 32 * 8 for r in range(1, 6)}
    assert all(0 < r["weight"] <= 10.0 for r in samples)
    for r in range(1, 6):  # group-mean baseline: each prompt's advantages sum to 0
        for pid in range(32):
            adv = [x["advantage"] for x in samples if x["round"] == r and x["prompt_id"] == pid]
            assert abs(sum(adv)) < 1e-4
    metrics = read_jsonl(out / "metrics.jsonl")
    _check_steps(metrics)
    for key in ("round", "sampled_reward_mean", "weight_mean", "weight_max", "frac_clipped", "ess",
                "advantage_mean", "advantage_std", "loss"):
        assert all(m[key] is not None for m in metrics), key
    assert all(0 < m["ess"] <= 1 and m["weight_max"] <= 10.0 for m in metrics)
    comps = read_jsonl(out / "completions.jsonl")
    assert comps and all("weight" in c and "advantage" in c for c in comps)
    assert (out / "final" / "adapter_config.json").is_file()


def test_kill_while_sampling_resumes_after_last_prompt(tmp_path):
    small = [*SMALL, "rs_sft.rounds=1", "rs_sft.generation_batch_size=16"]  # 2 prompts per generate call
    out = tmp_path / "run"
    res = _train("rs_sft", RS_DEMO, out, *small, faults={"RLFT_FAULT_SIGTERM_AFTER_PROMPTS": "4"})
    assert res.returncode == 130, res.stderr[-3000:]
    assert "--resume" in res.stderr
    first = read_jsonl(out / "samples.jsonl")
    assert sorted({r["prompt_id"] for r in first}) == [0, 1, 2, 3] and len(first) == 4 * 8
    assert "kept" not in first[0]  # not decided yet
    assert _summary(out)["status"] == "interrupted"
    assert not (out / "final").exists()

    res = _train("rs_sft", RS_DEMO, out, *small, resume=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "4 of 8 prompts already sampled" in res.stderr
    resumed = read_jsonl(out / "samples.jsonl")
    ref_out = tmp_path / "ref"
    assert _train("rs_sft", RS_DEMO, ref_out, *small).returncode == 0
    ref = read_jsonl(ref_out / "samples.jsonl")
    # the done prompts were not sampled again, and per-call seeds make the rest what an uninterrupted run draws
    assert [(r["prompt_id"], r["completion"], r["total"], r["kept"]) for r in resumed] == \
           [(r["prompt_id"], r["completion"], r["total"], r["kept"]) for r in ref]
    assert _summary(out)["status"] == "finished"
    again = _train("rs_sft", RS_DEMO, out, *small, resume=True)  # a finished run has nothing left to do
    assert again.returncode == 2 and "nothing left to do" in again.stderr


def test_kill_while_training_resumes_from_checkpoint_without_sampling(tmp_path):
    small = [*SMALL, "awr.rounds=2", "train.save_steps=2", "monitor.ess_warn=0.99"]
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rlft.cli", "train", "--stage", "awr", "--hw", "cpu", "-c", AWR_DEMO,
                             f"train.output_dir={out}", *small], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    marker = out / "checkpoints" / "round-2" / "checkpoint-2" / "rlft_complete"
    deadline = time.time() + 300
    while not marker.exists():
        assert proc.poll() is None and time.time() < deadline, "run ended before round 2's first checkpoint"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    samples_before = (out / "samples.jsonl").read_text()
    steps_before = [r["step"] for r in read_jsonl(out / "metrics.jsonl")]

    res = _train("awr", AWR_DEMO, out, *small, resume=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming at round 2" in res.stderr
    assert "training without sampling again" in res.stderr and "resuming training from checkpoint-" in res.stderr
    assert (out / "samples.jsonl").read_text() == samples_before
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics][:len(steps_before)] == steps_before
    assert sorted({m["step"] for m in metrics}) == list(range(1, metrics[-1]["step"] + 1))  # no gap
    s = _summary(out)
    assert s["status"] == "finished" and s["steps"] == metrics[-1]["step"]
    assert s["eval"]["start"]["reward_mean"] is not None and s["eval"]["end"]["reward_mean"] is not None
    health = read_jsonl(out / "health.jsonl")
    assert any(h["rule"] == "awr_ess" and h["level"] == "warning" for h in health)


def test_nothing_above_threshold_stops_before_training(tmp_path):
    out = tmp_path / "run"
    evals = tmp_path / "eval.jsonl"  # eval.start comes from data.eval's first data.eval_prompts rows
    evals.write_text("".join(json.dumps({"prompt": f"Repeat the letter {c}: ", "target": c}) + "\n" for c in "abc"))
    res = _train("rs_sft", RS_DEMO, out, *SMALL, "rs_sft.rounds=1", "rs_sft.reward_threshold=5",
                 f"data.eval={evals}", "data.eval_prompts=2")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "reward_threshold (5.0)" in res.stderr and "min " in res.stderr and "median " in res.stderr
    assert "Traceback" not in res.stderr
    assert len(read_jsonl(out / "samples.jsonl")) == 8 * 8
    s = _summary(out)
    assert s["status"] == "failed" and s["exit_code"] == 2 and s["steps"] == 0
    assert s["eval"]["start"]["prompts"] == 2 and s["eval"]["start"]["n"] == 2 * 8 and "end" not in s["eval"]
    assert not (out / "final").exists()


def test_chat_prompts_train_as_conversations(tmp_path):
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"Repeat the letter {c}: "}],
                                        "target": c}) + "\n" for c in "zzzzzzzz"))
    out = tmp_path / "run"
    res = _train("awr", AWR_DEMO, out, *SMALL, f"data.train={data}", "awr.rounds=1")
    assert res.returncode == 0, res.stderr[-3000:]
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 8 * 8 and all(isinstance(r["prompt"], list) for r in samples)
    assert (out / "final" / "adapter_config.json").is_file()
    s = _summary(out)
    assert s["status"] == "finished" and s["max_steps"] == s["steps"]


def test_two_processes_on_cpu_decide_and_train_alike(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "awr", "--hw", "ddp", "-c", AWR_DEMO, "hw.device=cpu", "hw.num_processes=2",
                  "train.bf16=false", "train.tf32=null", "train.gradient_checkpointing=false", "data.max_samples=4",
                  "data.eval_prompts=2", "awr.rounds=2", "train.per_device_train_batch_size=8",
                  "train.gradient_accumulation_steps=1", f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    dist = json.loads((out / "distributed.json").read_text())
    assert dist["num_processes"] == 2 and dist["in_sync"], dist
    samples = read_jsonl(out / "samples.jsonl")  # written by rank 0 only
    assert Counter((r["round"], r["prompt_id"], r["sample"]) for r in samples) == \
        {(r, p, g): 1 for r in (1, 2) for p in range(4) for g in range(8)}
    assert _summary(out)["status"] == "finished"
