"""FSDP2 on CPU over gloo, two processes, every stage: the model is really sharded (summary.json's
`distributed` block), training matches the DDP (or single-process) run of the same global batch, the final
model loads in one process without rlft, and an interrupted run resumes to the uninterrupted one."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, cli_command, one_launch_at_a_time, read_jsonl, run_cli

pytestmark = pytest.mark.e2e

TWO_CPU = ("hw.device=cpu", "hw.num_processes=2", "train.bf16=false", "train.tf32=null")
# stage -> (example, overrides that keep the run to a few steps)
STAGES = {
    "grpo": ("configs/examples/grpo_demo.yaml", ("train.max_steps=2",)),
    "dpo": ("configs/examples/dpo_demo.yaml", ("train.max_steps=2",)),
    "orpo": ("configs/examples/orpo_demo.yaml", ("train.max_steps=2",)),
    "rs_sft": ("configs/examples/rs_sft_demo.yaml", ("rs_sft.rounds=2", "train.max_steps=2")),
    "awr": ("configs/examples/awr_demo.yaml", ("awr.rounds=2", "train.max_steps=2")),
    "ppo": ("configs/examples/ppo_demo.yaml", ("ppo.num_episodes=32", "ppo.init_kl_coef=0.05")),
    "episodes": ("configs/examples/tool_use_grpo.yaml", ("train.max_steps=1",)),
}


def _train(out, stage, hw, *extra):
    example, short = STAGES[stage]
    res = run_cli("train", "--stage", "grpo" if stage == "episodes" else stage, "--hw", hw, "-c", example,
                  *(TWO_CPU if hw != "cpu" else ()), *short, *extra, f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-4000:]
    return res


def _losses(out):
    """Each step's loss and grad norm, flat."""
    return [x for r in read_jsonl(out / "metrics.jsonl") if "loss" in r for x in (r["loss"], r.get("grad_norm"))]


def _safetensors(path):
    from safetensors.torch import load_file

    return load_file(str(path))


def _max_diff(a, b):
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def grpo_two_processes(tmp_path_factory):
    """The GRPO demo's two steps on two CPU processes under FSDP and under DDP, {hw: (run folder, CLI result)}:
    three tests read them, none changes them."""
    base = tmp_path_factory.mktemp("grpo_two_processes")
    return {hw: (base / hw, _train(base / hw, "grpo", hw)) for hw in ("fsdp", "ddp")}


@pytest.mark.parametrize("stage", list(STAGES))
def test_every_stage_shards_on_two_cpu_processes(tmp_path, stage, grpo_two_processes):
    out = tmp_path / "run"
    if stage == "grpo":
        out, res = grpo_two_processes["fsdp"]
    else:
        res = _train(out, stage, "fsdp")
    d = json.loads((out / "summary.json").read_text())["distributed"]
    assert (d["strategy"], d["fsdp_version"], d["world_size"], d["accelerate_type"]) == ("fsdp", 2, 2, "FSDP"), d
    assert d["params_local_max"] <= 0.6 * d["params_full"], d  # each rank holds about half
    assert "FSDP2 over 2 processes" in res.stderr and "each rank holds at most 50%" in res.stderr
    assert (out / "final" / "adapter_model.safetensors").is_file()
    assert len([line for line in res.stderr.splitlines() if line.startswith("rlft: done at step")]) == 1
    if stage == "ppo":  # the value head, sharded with the policy, trained and saved
        head = _safetensors(out / "final" / "value_head.safetensors")
        assert head["weight"].abs().sum() > 0


def test_fsdp_matches_ddp_on_the_same_global_batch(grpo_two_processes):
    """GRPO: the same losses and grad norms as DDP on every step, and the same adapter (DDP is the reference
    for sampling stages, whose per-rank seeds differ from one process)."""
    (fsdp, _), (ddp, _) = grpo_two_processes["fsdp"], grpo_two_processes["ddp"]
    assert _losses(fsdp) == pytest.approx(_losses(ddp), abs=1e-6)
    a = _safetensors(fsdp / "final" / "adapter_model.safetensors")
    b = _safetensors(ddp / "final" / "adapter_model.safetensors")
    assert _max_diff(a, b) < 1e-6


def test_fsdp_first_step_equals_one_process(tmp_path):
    """ORPO, 2 processes x 4 pairs vs one process x 8 pairs. FSDP equals DDP to float32 rounding; both differ
    from one process by about 1e-4 relative (measured 8e-5), because TRL averages each rank's token-mean NLL
    where one process takes the mean over all tokens of the batch, and the ranks hold different token counts."""
    pairs = ("train.per_device_train_batch_size=4", "train.gradient_accumulation_steps=1")
    _train(tmp_path / "fsdp", "orpo", "fsdp", *pairs)
    _train(tmp_path / "ddp", "orpo", "ddp", *pairs)
    _train(tmp_path / "one", "orpo", "cpu", "train.per_device_train_batch_size=8",
           "train.gradient_accumulation_steps=1")
    fsdp, ddp, one = (_losses(tmp_path / name)[0] for name in ("fsdp", "ddp", "one"))
    assert fsdp == pytest.approx(ddp, rel=1e-6)
    assert fsdp == pytest.approx(one, rel=2e-4)


@pytest.mark.parametrize("stage", ["grpo", "ppo", "rs_sft"])
def test_full_fine_tuning_writes_a_plain_model(tmp_path, stage):
    """lora.enabled=false: each rank writes its shard at checkpoints, and final/ (and RS-SFT's round models) is an
    ordinary transformers model gathered from them that loads in one process without rlft; PPO's value head
    beside it."""
    out = tmp_path / "run"
    _train(out, stage, "fsdp", "lora.enabled=false", "train.learning_rate=1e-4", "train.save_steps=1",
           "ppo.save_interval=16")
    assert any((out / "checkpoints").rglob("pytorch_model_fsdp_0"))
    assert (out / "final" / "model.safetensors").is_file()
    code = ("import sys; from transformers import AutoModelForCausalLM as M; m = M.from_pretrained(sys.argv[1]); "
            "print('PARAMS', sum(p.numel() for p in m.parameters()))")
    res = subprocess.run([sys.executable, "-c", code, str(out / "final")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    full = json.loads((out / "summary.json").read_text())["distributed"]["params_full"]
    head = 0
    if stage == "ppo":  # the value head (hidden size + bias) is trained with the policy and saved beside it
        head = sum(t.numel() for t in _safetensors(out / "final" / "value_head.safetensors").values())
    assert f"PARAMS {full - head}" in res.stdout


def test_resume_after_sigterm_reproduces_the_uninterrupted_run(tmp_path):
    """SIGTERM to `rlft train` (as a scheduler sends it): every rank finishes its step and checkpoints; the
    resumed run's metrics and adapter equal the uninterrupted run's exactly (LoRA, FULL_STATE_DICT checkpoints
    written by rank 0 alone)."""
    example, _ = STAGES["grpo"]
    args = ["train", "--stage", "grpo", "--hw", "fsdp", "-c", example, *TWO_CPU, "train.max_steps=6",
            "train.save_steps=100"]
    out = tmp_path / "cut"
    with one_launch_at_a_time():  # the profile's port, as run_cli's multi-process runs
        proc = subprocess.Popen([*cli_command(), *args, f"train.output_dir={out}"], cwd=ROOT, env=os.environ,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "metrics.jsonl").is_file() and len(read_jsonl(out / "metrics.jsonl")) >= 2:
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.05)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert err.count("rlft: interrupted at step") == 1, err[-3000:]
    assert any((out / "checkpoints").glob("checkpoint-*/rlft_complete"))
    res = run_cli(*args, f"train.output_dir={out}", "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    whole = tmp_path / "whole"
    res = run_cli(*args, f"train.output_dir={whole}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == list(range(1, 7))
    assert _losses(out) == _losses(whole)
    assert _max_diff(_safetensors(out / "final" / "adapter_model.safetensors"),
                     _safetensors(whole / "final" / "adapter_model.safetensors")) == 0.0


# --- two "machines" on one host (127.0.0.1), one CPU process each -----------------------------------------
def _machines(base, port, extra_of=lambda rank: (), timeout_s=120, ranks=(0, 1)):
    """`rlft train` once per machine rank, each in its own working folder (as on two hosts), run together."""
    example, short = STAGES["grpo"]
    procs = {}
    for rank in ranks:
        cwd = base / f"machine{rank}"
        cwd.mkdir(parents=True)
        args = ["train", "--stage", "grpo", "--hw", "ddp", "-c", str(ROOT / example), "hw.device=cpu",
                "hw.num_processes=1", "hw.num_machines=2", f"hw.machine_rank={rank}", "hw.main_process_ip=127.0.0.1",
                f"hw.main_process_port={port}", f"hw.rendezvous_timeout_s={timeout_s}", "train.bf16=false",
                "train.tf32=null", *short, "train.output_dir=run", *extra_of(rank)]
        procs[rank] = subprocess.Popen([*cli_command(), *args], cwd=cwd, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True,
                                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    return {rank: (p.wait(timeout=600), p.communicate()[1]) for rank, p in procs.items()}


def _port():
    from rlft.launch.processes import free_port

    return free_port()


def test_two_machines_on_loopback_train_one_run(tmp_path, grpo_two_processes):
    """Machine 0 holds the run folder; machine 1 writes only its own RNG state. The metrics equal DDP x 2 on one
    machine (the same 2 ranks, the same seeds)."""
    ends = _machines(tmp_path, _port())
    assert all(code == 0 for code, _ in ends.values()), ends[0][1][-3000:] + ends[1][1][-3000:]
    run0, run1 = tmp_path / "machine0" / "run", tmp_path / "machine1" / "run"
    d = json.loads((run0 / "summary.json").read_text())["distributed"]
    assert (d["strategy"], d["world_size"], d["num_machines"]) == ("ddp", 2, 2)
    assert not (run1 / "metrics.jsonl").exists() and not (run1 / "final").exists()
    one_host, _ = grpo_two_processes["ddp"]
    assert _losses(run0) == _losses(one_host)


def test_machines_that_differ_or_never_come_stop_with_exit_3(tmp_path):
    """A machine started with another config: both stop with exit 3, naming it. A machine that never comes: the
    other stops after hw.rendezvous_timeout_s with exit 3 (not a hang), and leaves no half-made run folder."""
    ends = _machines(tmp_path / "differ", _port(), lambda rank: ("train.learning_rate=0.5",) if rank else ())
    for code, err in ends.values():
        assert code == 3, err[-3000:]
        assert "rank 1 (machine 1" in err and "changing only hw.machine_rank" in err
    started = time.monotonic()
    ((code, err),) = _machines(tmp_path / "alone", _port(), timeout_s=8, ranks=(0,)).values()
    assert code == 3 and "did not all join the run within hw.rendezvous_timeout_s=8 s" in err, err[-3000:]
    assert time.monotonic() - started < 90
    assert not any((tmp_path / "alone" / "machine0" / "run").iterdir())


def test_an_explicit_reference_is_sharded_and_scores_as_under_ddp(tmp_path):
    """GRPO with KL to a reference checkpoint (model.ref: PATH): the reference is sharded like the policy (TRL's
    own wrapping) and scored through TRL's fused LM head, as the policy is; KL and losses equal DDP's."""
    ref = tmp_path / "ref"
    assert run_cli("tiny-model", str(ref)).returncode == 0
    kl = ("grpo.kl_penalty_coef=0.05", f"model.ref={ref}")
    _train(tmp_path / "fsdp", "grpo", "fsdp", *kl)
    _train(tmp_path / "ddp", "grpo", "ddp", *kl)
    rows = [r for r in read_jsonl(tmp_path / "fsdp" / "metrics.jsonl") if "loss" in r]
    assert rows[-1]["kl_policy_ref"] > 0
    assert _losses(tmp_path / "fsdp") == pytest.approx(_losses(tmp_path / "ddp"), abs=1e-6)
