"""`llm_judge` through the CLI on the tiny model, judged by the local server of tests/judge_server.py (a completion
is good when it holds the prompt's target letter): `rlft rewards try`, a 2-step GRPO run that writes the judge's
counts and its reply cache, a resume that replays a step from the cache without a request, a judge that is not
there (exit 4, one line naming the URL), a rejected key (exit 2, the variable named) and no run file holding the
key."""

from __future__ import annotations

import json
import shutil
import socket

import pytest

from conftest import ROOT, read_jsonl, run_cli
from tests.judge_server import JudgeServer

pytestmark = pytest.mark.e2e
DEMO = ROOT / "configs/examples/grpo_demo.yaml"
KEY = "sk-e2e-judge-5f1c0b9a7d"
ENV = {"RLFT_TEST_JUDGE_KEY": KEY}
SHORT = ["train.max_steps=2", "train.save_steps=1", "data.eval_prompts=0", "train.per_device_train_batch_size=8",
         "grpo.group_size=4"]


def _config(tmp_path, base_url: str):
    cfg = tmp_path / "judge.yaml"
    cfg.write_text(f"""rewards:
  - fn: llm_judge
    timeout_s: 60
    kwargs:
      base_url: {base_url}
      model: judge
      api_key_env: RLFT_TEST_JUDGE_KEY
      template: "Prompt: {{prompt}}\\nTarget letter: {{target}}\\n<c>{{completion}}</c>\\nScore 0-10:"
      score: {{kind: number, min: 0, max: 10}}
      concurrency: 4
      timeout_s: 10
      backoff_s: 0.05
monitor:
  log_completions: -1
""")
    return cfg


def _train(cfg, out, *extra, env=ENV):
    return run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, "-c", cfg, f"train.output_dir={out}",
                   *SHORT, *extra, env=env)


@pytest.fixture(scope="module")
def server():
    with JudgeServer(key=KEY) as s:
        yield s


@pytest.fixture(scope="module")
def trained(server, tmp_path_factory):
    """A 2-step GRPO run judged by the server: (config, run folder, judge requests it made, CLI result)."""
    folder = tmp_path_factory.mktemp("judged")
    cfg, out = _config(folder, server.base_url), folder / "run"
    server.reset("score")
    res = _train(cfg, out)
    return cfg, out, server.requests, res


def test_grpo_judged_by_the_server_writes_counts_and_a_cache(trained):
    cfg, out, requests, res = trained
    assert res.returncode == 0, res.stderr[-3000:]
    completions = read_jsonl(out / "completions.jsonl")
    assert len(completions) == 16  # 2 steps x 2 prompts x 4
    for row in completions:  # the server's verdict: does the completion hold the target letter
        assert row["rewards"]["llm_judge"] == pytest.approx(0.9 if "z" in row["completion"] else 0.1, abs=1e-6)
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "rewards/llm_judge/judge_requests" in r]
    assert [r["step"] for r in rows] == [1, 2]
    distinct = len({(r["prompt"], r["completion"]) for r in completions})
    assert sum(r["rewards/llm_judge/judge_requests"] for r in rows) == requests == distinct
    assert sum(r["rewards/llm_judge/judge_cached"] for r in rows) == 16 - distinct
    assert all(r["rewards/llm_judge/errors"] == 0 for r in rows)
    cache = read_jsonl(out / "judge_cache.jsonl")
    assert len(cache) == distinct


def test_resume_replays_a_step_from_the_cache(trained, server, tmp_path):
    cfg, finished, _, res = trained
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    # a run that died after step 2 was judged, before its checkpoint: resumed from step 1, step 2 is drawn again
    shutil.rmtree(out / "checkpoints" / "checkpoint-2")
    shutil.rmtree(out / "final")
    server.reset("score")
    res = _train(cfg, out, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    step2 = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("step") == 2 and "reward" in r][-1]
    assert server.requests == 0 and step2["rewards/llm_judge/judge_requests"] == 0
    assert step2["rewards/llm_judge/judge_cached"] == 8


def test_no_run_file_holds_the_key(trained):
    _, out, _, res = trained
    assert res.returncode == 0, res.stderr[-3000:]
    assert KEY not in res.stdout + res.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 10 and (out / "config.yaml") in files
    assert [p for p in files if KEY.encode() in p.read_bytes()] == []
    assert "RLFT_TEST_JUDGE_KEY" in (out / "config.yaml").read_text()  # the variable's name is the config


def test_rewards_try_with_the_judge(server, tmp_path):
    rows = [{"row": {"prompt": "Repeat the letter z: ", "target": "z"}, "completion": c}
            for c in ("zzzz", "abc", "z z", "q")]
    data = tmp_path / "c.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    server.reset("score")
    res = run_cli("rewards", "try", "-c", DEMO, "-c", _config(tmp_path, server.base_url), "--completions", data,
                  "-o", tmp_path / "scored.jsonl", cwd=tmp_path, env=ENV)
    assert res.returncode == 0, res.stderr[-3000:]
    assert server.requests == 4
    scored = read_jsonl(tmp_path / "scored.jsonl")
    assert [r["rewards"]["llm_judge"] for r in scored] == pytest.approx([0.9, 0.1, 0.9, 0.1])
    assert any(line.startswith("llm_judge") for line in res.stdout.splitlines()), res.stdout


def test_unreachable_judge_stops_with_exit_4_and_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # bound, never listening: connection refused
        res = _train(_config(tmp_path, url), tmp_path / "run")
    assert res.returncode == 4, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    said = [line for line in res.stderr.splitlines() if url in line]
    assert len(said) == 1 and "cannot reach the judge" in said[0] and "connection refused" in said[0]
    assert not (tmp_path / "run").exists()  # stopped before the run folder


def test_rejected_key_is_one_line_naming_the_variable(server, tmp_path):
    server.reset("score")
    res = _train(_config(tmp_path, server.base_url), tmp_path / "run", env={"RLFT_TEST_JUDGE_KEY": "sk-wrong"})
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "sk-wrong" not in res.stderr
    assert "rejected the API key in $RLFT_TEST_JUDGE_KEY (HTTP 401)" in res.stderr
    assert server.requests == 0


def test_validate_config_checks_the_judge_without_network(tmp_path):
    cfg = _config(tmp_path, "localhost:8000")
    text = cfg.read_text().replace("{target}", "{answer}").replace("api_key_env: RLFT_TEST_JUDGE_KEY",
                                                                    "api_key_env: sk-123")
    cfg.write_text(text)
    res = run_cli("validate-config", "--stage", "grpo", "-c", DEMO, "-c", cfg)
    assert res.returncode == 2, res.stdout + res.stderr
    out = res.stdout + res.stderr
    assert "base_url must be an http(s) URL" in out and "api_key_env must name the environment variable" in out
    assert "reads column `answer`" in out
    res = run_cli("validate-config", "--stage", "grpo", "-c", ROOT / "configs/examples/grpo_judge.yaml")
    assert res.returncode == 0, res.stdout + res.stderr


def test_judge_failing_mid_run_stops_with_exit_4_and_one_line(server, tmp_path):
    server.reset("malformed")  # it lists its models (the check before the run passes), then answers nonsense
    out = tmp_path / "run"
    res = _train(_config(tmp_path, server.base_url), out, "train.max_steps=6")
    assert res.returncode == 4, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    said = [line for line in res.stderr.splitlines() if "rlft: stopped:" in line]
    assert len(said) == 1 and "'llm_judge': 32 errors" in said[0], res.stderr[-3000:]
    assert f"the judge at {server.base_url}/chat/completions sent a reply that is not a chat completion" in said[0]
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "rewards/llm_judge/errors" in r]
    assert [r["rewards/llm_judge/errors"] for r in rows] == [8.0] * 3  # step 4 tripped the guard (32 of 32)
    assert json.loads((out / "summary.json").read_text())["exit_code"] == 4
    assert [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()] == []  # errors logged too
    assert "not a chat completion" in (out / "reward_logs.jsonl").read_text()


def test_overwrite_of_a_judged_run_takes_the_cache_as_rlft_s_own(trained, server, tmp_path):
    cfg, finished, _, res = trained
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    server.reset("score")
    res = _train(cfg, out, "--overwrite", "train.max_steps=1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "deleted the replaced run" in res.stderr and not (tmp_path / "run.old").exists()
    assert (out / "judge_cache.jsonl").exists()  # the new run's own cache: it started empty
