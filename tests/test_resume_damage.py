"""Damaged run files read by a resume, by eval/generate/export and by model.init_from: a checkpoint whose
state files do not load is named damaged (like a truncated one), a log row that cannot be read is kept as it
is, a damaged config.yaml is one line naming it, exit 2; never a traceback. No training here (fast)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from rlft.runtime import checkpoint_problem, drop_rows_after

STEP = 5


def _whole_checkpoint(folder: Path) -> Path:
    """A checkpoint as transformers and rlft write one: state, weights, optimizer, scheduler, RNG, rlft state."""
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from transformers import TrainerState

    ck = folder / f"checkpoint-{STEP}"
    ck.mkdir(parents=True)
    TrainerState(global_step=STEP, max_steps=10, log_history=[{"loss": 0.5, "step": STEP}]).save_to_json(
        str(ck / "trainer_state.json"))
    save_file({"w": torch.ones(4)}, str(ck / "adapter_model.safetensors"))
    param = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.AdamW([param])
    torch.save(opt.state_dict(), ck / "optimizer.pt")
    torch.save(torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0).state_dict(), ck / "scheduler.pt")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()},
               ck / "rng_state.pth")
    (ck / "rlft_state.json").write_text(json.dumps({"kl_controller": {"value": 0.0}, "last_kl": None,
                                                    "trainer": {"eval_start": {"reward_mean": 0.1, "n": 4}}}))
    return ck


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _torch_save(obj):
    def write(path: Path) -> None:
        import torch

        torch.save(obj, path)
    return write


# (file, how it is damaged, the problem checkpoint_problem names)
DAMAGE = [
    ("rlft_state.json", "{oops", "rlft_state.json is not valid JSON"),
    ("rlft_state.json", "[1, 2]", "rlft_state.json holds a list, not an object"),
    ("rlft_state.json", '"state"', "rlft_state.json holds a string, not an object"),
    ("rlft_state.json", b"\xff\xfe\x00garbage", "rlft_state.json is not valid JSON"),
    ("rlft_state.json", '{"kl_controller": 0.05}', "rlft_state.json: kl_controller is a number, not an object"),
    ("rlft_state.json", '{"trainer": null}', "rlft_state.json: trainer is null, not an object"),
    ("rlft_state.json", '{"trainer": {"eval_start": [0.1]}}', "rlft_state.json: trainer.eval_start is a list, not an "
                                                              "object"),
    ("rlft_state.json", '{"trainer": {"eval_start": {"reward_mean": "high"}}}',
     "rlft_state.json: trainer.eval_start reward_mean is a string, not a number"),
    ("rlft_state.json", '{"trainer": {"eval_start": {"reward_mean": 0.5, "n": -3}}}',
     "rlft_state.json: trainer.eval_start n is a number -3, not a count"),
    ("trainer_state.json", "[1, 2]", "trainer_state.json holds a list, not an object"),
    ("trainer_state.json", '"step 5"', "trainer_state.json holds a string, not an object"),
    ("trainer_state.json", {"global_step": "5"}, "trainer_state.json: global_step is a string '5', not int"),
    ("trainer_state.json", {"global_step": 4}, "trainer_state.json says global_step 4 in checkpoint-5"),
    ("trainer_state.json", {"log_history": "none"}, "trainer_state.json: log_history is a string 'none', not list"),
    ("trainer_state.json", {"max_steps": None}, "trainer_state.json: max_steps is null, not int"),
    ("trainer_state.json", {"stateful_callbacks": [1]}, "trainer_state.json: stateful_callbacks is a list, not dict | "
                                                        "None"),
    ("trainer_state.json", {"no_such_field": 1}, "trainer_state.json has keys TrainerState does not know: "
                                                 "no_such_field"),
    ("rng_state.pth", b"garbage" * 20, "rng_state.pth is not a torch.save archive (140 bytes)"),
    ("rng_state.pth", _torch_save({"python": 1, "numpy": 2, "cpu": 3}), "rng_state.pth does not load (TypeError)"),
    ("rng_state.pth", _torch_save([1, 2]), "rng_state.pth does not load (TypeError)"),
    ("optimizer.pt", _torch_save({"lr": 0.1}), "optimizer.pt does not hold an optimizer state"),
    ("scheduler.pt", _torch_save([0.1]), "scheduler.pt does not hold a scheduler state"),
    ("training_args.bin", b"\x80\x04not a zip", "training_args.bin is not a torch.save archive (11 bytes)"),
]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    return _whole_checkpoint(tmp_path_factory.mktemp("whole"))


@pytest.mark.parametrize("name,damage,problem", DAMAGE, ids=[f"{d[0]}-{i}" for i, d in enumerate(DAMAGE)])
def test_state_files_that_do_not_load_make_the_checkpoint_damaged(whole, tmp_path, name, damage, problem):
    ck = tmp_path / whole.name
    shutil.copytree(whole, ck)
    assert checkpoint_problem(ck) is None  # whole, as saved
    if isinstance(damage, dict):
        _edit_json(ck / name, **damage)
    elif isinstance(damage, bytes):
        (ck / name).write_bytes(damage)
    elif callable(damage):
        damage(ck / name)
    else:
        (ck / name).write_text(damage)
    got = checkpoint_problem(ck)
    assert got is not None and got.startswith(problem), got


def test_drop_rows_after_keeps_lines_it_cannot_read_as_rows(tmp_path, capsys):
    log = tmp_path / "metrics.jsonl"
    odd = [b'[1, 2]\n', b'"text"\n', b'{"step": "3"}\n', b'{"loss": 1}\n', b'\xff\xfe not utf-8\n', b'{"step": NaN}\n',
           b'{"step": true}\n']
    good = [b'{"step": 1}\n', b'{"step": 2}\n']
    log.write_bytes(good[0] + odd[0] + odd[1] + good[1] + b"".join(odd[2:]) + b'{"step": 3}\n{"step": 4}\n'
                    + b'{"step": 5, "lo')  # a line cut short by a kill
    assert drop_rows_after(log, 2) == 3  # steps 3 and 4, and the torn line
    assert log.read_bytes() == good[0] + odd[0] + odd[1] + good[1] + b"".join(odd[2:])  # the rest byte for byte
    err = capsys.readouterr().err
    assert f"WARNING {len(odd)} line(s) of metrics.jsonl are not rows with a numeric step; kept as they are" in err
    assert "removed 3 row(s) after step 2 from metrics.jsonl" in err
    # a whole last row without its newline is kept, and ended so the next append does not run on from it
    log.write_bytes(b'{"step": 1}\n{"step": 2}')
    assert drop_rows_after(log, 2) == 0 and log.read_bytes() == b'{"step": 1}\n{"step": 2}\n'


# ---- run files read by eval / generate / export and by model.init_from -----------------------------
def _run_with_adapter(root: Path, config: bytes | str) -> Path:
    (root / "final").mkdir(parents=True)
    (root / "final" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "tiny",
                                                                     "peft_type": "LORA"}))
    (root / "config.yaml").write_bytes(config if isinstance(config, bytes) else config.encode())
    return root


DAMAGED_CONFIGS = {
    "not yaml": ("stage: [grpo\n  model: {", "is damaged: not readable YAML"),
    "binary": (b"\x00\xff\xfe\x80 binary", "is damaged: not readable YAML"),
    "a list": ("- grpo\n- tiny\n", "is damaged: the whole file is not what rlft writes there"),
    "model a list": ("stage: grpo\nmodel: [tiny]\n", "is damaged: model is not what rlft writes there"),
    "stage a mapping": ("stage: {name: grpo}\nmodel: {name_or_path: tiny}\n", "is damaged: stage is not what rlft"),
}


@pytest.mark.parametrize("case", list(DAMAGED_CONFIGS))
def test_generate_eval_export_name_a_damaged_run_config(tmp_path, case):
    text, said = DAMAGED_CONFIGS[case]
    run = _run_with_adapter(tmp_path / "run", text)
    for args in (["generate", run, "-p", "hi"], ["eval", run], ["export", run, "-o", tmp_path / "out"]):
        res = run_cli(*args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (args, res.stderr[-2000:])
        (line,) = [x for x in res.stderr.splitlines() if x.startswith("error:")]
        assert f"{run / 'config.yaml'} {said}" in line, line
    assert not (tmp_path / "out").exists()


def test_export_names_a_damaged_adapter_config_before_writing(tmp_path):
    run = _run_with_adapter(tmp_path / "run", "stage: grpo\nmodel: {name_or_path: tiny}\n")
    (run / "final" / "adapter_config.json").write_text("[1]")
    res = run_cli("export", run, "-o", tmp_path / "out")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"{run / 'final' / 'adapter_config.json'} is damaged (not a JSON object)" in res.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


INIT_FROM_CONFIGS = {
    "binary": (b"\x00\xff\xfe\x80 binary", "cannot read"),
    "a list": ("- tiny\n", "is damaged: it is not a mapping"),
    "model a string": ("model: tiny\n", "is damaged: its model section is not a mapping"),
}


@pytest.mark.parametrize("case", list(INIT_FROM_CONFIGS))
def test_init_from_a_run_with_a_damaged_config_is_one_problem(tmp_path, case):
    text, said = INIT_FROM_CONFIGS[case]
    earlier = _run_with_adapter(tmp_path / "earlier", text)
    cfg = tmp_path / "next.yaml"
    cfg.write_text(f"model:\n  init_from: {earlier}\ndata:\n  train: demo\nrewards:\n  - fn: char_fraction\n")
    res = run_cli("validate-config", "--stage", "grpo", "-c", cfg)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "model.init_from" in res.stderr and f"{earlier / 'config.yaml'}" in res.stderr and said in res.stderr, \
        res.stderr


def test_init_from_chain_names_a_damaged_or_missing_earlier_run(tmp_path):
    from rlft.config.schema import RlftConfig
    from rlft.config.init_from import ChainError, starts_from_base
    from rlft.models.init_from import start_model
    from rlft.models.loading import ModelLoadError

    cfg = RlftConfig()
    middle = _run_with_adapter(tmp_path / "middle", "stage: grpo\nmodel: [tiny]\n")
    with pytest.raises(ModelLoadError, match=r"middle/config.yaml is damaged: its model section is not a mapping"):
        start_model(middle, cfg)
    (middle / "config.yaml").write_text("stage: grpo\nmodel:\n  init_from: [a, b]\n")
    with pytest.raises(ChainError, match=r"its model.init_from is not a path"):
        starts_from_base(middle)
    (middle / "config.yaml").write_text(f"stage: grpo\nmodel:\n  init_from: {tmp_path / 'gone'}\n")
    with pytest.raises(ModelLoadError, match=r"started from .*gone, which is gone"):
        start_model(middle, cfg)


@pytest.mark.parametrize("text", ["[1, 2]", '"finished"', "{bad", "null"])
def test_pipeline_reads_a_damaged_stage_summary_as_not_finished(tmp_path, text):
    from rlft.monitor.summary import read_summary
    from rlft.pipeline.runner import stage_finished

    run = _run_with_adapter(tmp_path / "run", "stage: grpo\n")
    (run / "summary.json").write_text(text)
    assert read_summary(run / "summary.json") is None and stage_finished(run) is False
    (run / "summary.json").write_text('{"status": "finished"}')
    assert stage_finished(run) is True
