"""Each hardware profile changes what actually runs: the trainer arguments every stage gets."""

import pytest

from rlft.config import load_config
from rlft.config.schema import HARDWARE, STAGES
from rlft.models.hardware import common_training_args

EXPECTED = {  # profile -> (bf16, fp16, tf32, use_cpu, optim, checkpointing, micro-batch, accumulation, workers)
    "cpu": (False, False, None, True, "adamw_torch", False, 8, 1, 0),
    "mps": (False, True, None, False, "adamw_torch", True, 1, 16, 2),
    "rtx4090": (True, False, True, False, "adamw_torch_fused", True, 4, 4, 4),
    "a100": (True, False, True, False, "adamw_torch_fused", False, 8, 2, 8),
    # multi-process: no DataLoader workers whatever the profile says (they die on the launcher's SIGTERM)
    "ddp": (True, False, True, False, "adamw_torch_fused", True, 4, 1, 0),
    "fsdp": (True, False, True, False, "adamw_torch", True, 4, 1, 0),
}


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("hw", HARDWARE)
def test_profile_maps_to_trainer_args(stage, hw):
    cfg, _, _ = load_config(stage, hw)
    args = common_training_args(cfg, "out")
    bf16, fp16, tf32, cpu, optim, ckpt, micro, accum, workers = EXPECTED[hw]
    assert (args["bf16"], args["fp16"], args.get("tf32"), args["use_cpu"]) == (bf16, fp16, tf32, cpu)
    assert args["optim"] == optim
    ckpt_key = "activation_checkpointing" if "activation_checkpointing" in args else "gradient_checkpointing"
    assert args[ckpt_key] is ckpt
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (micro, accum)
    assert args["dataloader_num_workers"] == workers
    if hw == "ddp":
        assert args["ddp_find_unused_parameters"] is False and args["ddp_bucket_cap_mb"] == 25
    if hw == "mps":
        assert args["torch_empty_cache_steps"] == 50


def test_fused_optimizer_falls_back_off_cuda():
    cfg, _, _ = load_config("grpo", "a100", [], ["hw.device=cpu", "train.bf16=false"])
    assert common_training_args(cfg, "out")["optim"] == "adamw_torch"


@pytest.mark.parametrize("stage", ["grpo", "dpo", "orpo"])
def test_cpu_profile_builds_real_trl_config(stage, tmp_path):
    """TRL configs default to bf16=True, which fails on a CPU: rlft must pass fp32 explicitly."""
    from rlft.stages.dpo import runner as dpo
    from rlft.stages.grpo import runner as grpo
    from rlft.stages.orpo import runner as orpo

    extra = {"grpo": ["-c", "configs/examples/grpo_demo.yaml"]}.get(stage, [])
    files = [extra[1]] if extra else []
    cfg, _, _ = load_config(stage, "cpu", files, ["data.train=demo"] if stage == "grpo" else [])
    build = {"grpo": grpo.grpo_trl_config, "dpo": dpo.dpo_trl_config, "orpo": orpo.orpo_trl_config}[stage]
    trl_cfg = build(cfg, str(tmp_path))
    assert trl_cfg.bf16 is False and trl_cfg.fp16 is False and trl_cfg.use_cpu is True
    assert trl_cfg.learning_rate == cfg.train.learning_rate


def test_accelerate_command_for_ddp_and_fsdp():
    from rlft.launch.processes import accelerate_command

    cfg, _, _ = load_config("grpo", "ddp", [],
                            ["hw.num_machines=2", "hw.machine_rank=1", "hw.main_process_ip=10.0.0.1"])
    cmd = accelerate_command(cfg, ["train", "--stage", "grpo"])
    joined = " ".join(cmd)
    assert "--multi_gpu" in cmd and "--num_processes 8" in joined and "--num_machines 2" in joined
    assert "--machine_rank 1" in joined and "--main_process_ip 10.0.0.1" in joined \
            and "--mixed_precision bf16" in joined
    assert cmd[-4:] == ["rlft.cli", "train", "--stage", "grpo"]
    cfg, _, _ = load_config("grpo", "fsdp")
    cmd = accelerate_command(cfg, ["train"])
    joined = " ".join(cmd)
    assert "--use_fsdp" in cmd and "--fsdp_version 2" in joined and "--fsdp_reshard_after_forward true" in joined
    assert "--fsdp_state_dict_type FULL_STATE_DICT" in joined  # LoRA: rank 0 writes whole checkpoints
    assert "--multi_gpu" not in cmd and "--rdzv_conf" not in cmd  # one machine: no rendezvous to bound
    cfg, _, _ = load_config("grpo", "fsdp", [], ["lora.enabled=false", "hw.fsdp_sharding_strategy=SHARD_GRAD_OP",
                                                 "hw.num_machines=2", "hw.main_process_ip=10.0.0.1",
                                                 "hw.rendezvous_timeout_s=42"])
    joined = " ".join(accelerate_command(cfg, ["train"]))
    assert "--fsdp_state_dict_type SHARDED_STATE_DICT" in joined and "--fsdp_reshard_after_forward false" in joined
    assert "--rdzv_conf timeout=42" in joined
