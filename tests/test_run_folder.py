"""Run-folder safety without training: the exclusive lock, --overwrite moving the old run aside."""

import json
import os
import socket
import subprocess
import sys

import pytest

from rlft.rundir.lock import LOCK_NAME, RunLock
from rlft.errors import RunError


def test_second_lock_is_refused_naming_the_holder(tmp_path):
    held = RunLock(tmp_path).acquire()
    with pytest.raises(RunError) as info:
        RunLock(tmp_path).acquire()
    msg = str(info.value)
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in msg and "in use" in msg
    held.release()
    assert not (tmp_path / LOCK_NAME).exists()
    RunLock(tmp_path).acquire().release()  # free again once released


def test_lock_held_by_another_process_is_refused(tmp_path):
    code = ("import sys, time; from rlft.rundir.lock import RunLock; RunLock(sys.argv[1]).acquire(); "
            "print('locked', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(RunError, match=f"pid {proc.pid} on host"):
            RunLock(tmp_path).acquire()
    finally:
        proc.kill()
        proc.wait()
    # the holder died without releasing: its lock is stale and is taken over
    RunLock(tmp_path).acquire().release()


def test_stale_lock_of_dead_pid_is_taken_over_with_a_message(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    lock = RunLock(tmp_path).acquire()
    err = capsys.readouterr().err
    assert "taking over a stale lock" in err and f"pid {dead.pid}" in err
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()


def test_checkpoint_problem_names_missing_and_truncated_files(tmp_path):
    import torch
    from safetensors.torch import save_file

    from rlft.runtime import checkpoint_problem

    ck = tmp_path / "checkpoint-5"
    ck.mkdir()
    assert checkpoint_problem(ck) == "trainer_state.json is missing"
    (ck / "trainer_state.json").write_text("{\"global_step\": ")
    assert checkpoint_problem(ck) == "trainer_state.json is not valid JSON"
    (ck / "trainer_state.json").write_text("{\"global_step\": 5}")
    assert checkpoint_problem(ck) == "it holds no model weights"
    save_file({"w": torch.ones(64)}, str(ck / "adapter_model.safetensors"))
    torch.save(torch.optim.SGD([torch.nn.Parameter(torch.ones(64))], lr=0.1).state_dict(), str(ck / "optimizer.pt"))
    assert checkpoint_problem(ck) is None
    opt = (ck / "optimizer.pt").read_bytes()
    (ck / "optimizer.pt").write_bytes(opt[: len(opt) // 2])
    assert checkpoint_problem(ck).startswith("optimizer.pt is truncated")
    (ck / "optimizer.pt").write_bytes(opt)
    w = (ck / "adapter_model.safetensors").read_bytes()
    (ck / "adapter_model.safetensors").write_bytes(w[:-4])
    assert checkpoint_problem(ck) == f"adapter_model.safetensors is truncated ({len(w) - 4} of {len(w)} bytes)"
    (ck / "adapter_model.safetensors").write_bytes(b"\0" * 3)
    assert "adapter_model.safetensors is truncated or not safetensors" in checkpoint_problem(ck)
