"""The pieces of multi-process runs that need no second process: the FSDP engagement check and its words, the
config fingerprint machines compare, the exit code the launcher reports, the cleanup of a run that never
started, and gathering for sampling on an unsharded model."""

import json

import pytest
import torch

from rlft.config import load_config
from rlft.launch.processes import forget_unstarted, free_port, port_is_free
from rlft.models.sharded import fsdp_units, whole_weights
from rlft.errors import RunError
from rlft.runtime.ranks import launched_exit_code, run_fingerprint
from rlft.runtime.sharding import ShardingError, check_sharded, describe, parameter_layout


def _cfg(*overrides, hw="fsdp"):
    return load_config("grpo", hw, [], ["hw.device=cpu", "hw.num_processes=2", "train.bf16=false", *overrides])[0]


def _block(**changes):
    block = {"strategy": "fsdp", "fsdp_version": 2, "accelerate_type": "FSDP", "world_size": 2, "num_machines": 1,
             "params_full": 1000, "params_local_max": 500, "params_local_min": 500, "sharded_tensors_min": 12}
    return {**block, **changes}


def test_fsdp_that_did_not_engage_is_refused_with_exit_3():
    cfg = _cfg()
    check_sharded(cfg, _block())  # engaged: nothing to say
    for block, words in ((_block(strategy="ddp", accelerate_type="MULTI_CPU"), "accelerate ran MULTI_CPU"),
                         (_block(sharded_tensors_min=0), "0 sharded tensors"),
                         (_block(world_size=1), "1 process(es)")):
        with pytest.raises(ShardingError, match="refusing to train unsharded") as err:
            check_sharded(cfg, block)
        assert isinstance(err.value, RunError) and err.value.exit_code == 3 and words in str(err.value)
    check_sharded(_cfg(hw="ddp"), _block(strategy="ddp", sharded_tensors_min=0))  # DDP asked for: no check


def test_start_line_words():
    assert describe(_block()) == ("FSDP2 over 2 processes on 1 machine(s): each rank holds at most 50% of 1,000 "
                                  "parameters")
    assert describe(_block(strategy="ddp", num_machines=2)).startswith("DDP over 2 processes on 2 machine(s)")


def test_parameter_layout_counts_tied_weights_once():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    assert parameter_layout(model) == (40, 40, 0)  # full, this rank, sharded tensors


def test_fingerprint_ignores_only_what_each_machine_sets_for_itself():
    two = ("hw.num_machines=2", "hw.main_process_ip=10.0.0.1")
    base = run_fingerprint(_cfg(*two))
    assert run_fingerprint(_cfg(*two, "hw.machine_rank=1", "train.output_dir=/elsewhere")) == base
    assert run_fingerprint(_cfg(*two, "train.learning_rate=0.5")) != base
    assert run_fingerprint(_cfg(*two, "hw.num_processes=4")) != base


def test_launcher_reports_the_ranks_own_exit_code(tmp_path):
    assert launched_exit_code(tmp_path, 0) == 0
    assert launched_exit_code(tmp_path, 1) == 1  # no rank left its code: torchrun's
    (tmp_path / "exit-1").write_text("3")
    assert launched_exit_code(tmp_path, 1) == 3
    (tmp_path / "exit-0").write_text("2")
    assert launched_exit_code(tmp_path, 1) == 2  # rank 0's first
    (tmp_path / "exit-0").write_text("garbage")
    assert launched_exit_code(tmp_path, 1) == 3


class _Run:
    def __init__(self, root):
        self.root, self.checkpoints = root, root / "checkpoints"


def test_a_run_whose_processes_never_started_leaves_nothing(tmp_path):
    root = tmp_path / "run"
    (root / "checkpoints").mkdir(parents=True)
    (root / ".rlft-made.json").write_text(json.dumps({"kind": "run"}))
    (root / "config.yaml").write_text("x: 1\n")
    forget_unstarted(_Run(root))
    assert list(root.iterdir()) == []
    # anything more (a metrics file, a checkpoint) and the folder is left as it is
    for extra in ("metrics.jsonl", "checkpoints/checkpoint-1/x"):
        (root / "checkpoints").mkdir(exist_ok=True)
        (root / "config.yaml").write_text("x: 1\n")
        (root / extra).parent.mkdir(parents=True, exist_ok=True)
        (root / extra).write_text("1")
        forget_unstarted(_Run(root))
        assert (root / extra).exists() and (root / "config.yaml").exists()
        (root / extra).unlink()


def test_sampling_gathers_nothing_on_an_unsharded_model():
    model = torch.nn.Linear(3, 3)
    assert fsdp_units(model) == []
    with whole_weights(model) as same:
        assert same is model


def test_free_port_is_free():
    port = free_port()
    assert 1024 < port < 65536 and port_is_free(port)
