"""Every private TRL / transformers (and torch) name rlft overrides, calls, reads or writes, in one table.

These names carry no compatibility promise: a TRL or transformers upgrade may rename one, change its
parameters, or stop setting an attribute. `tests/test_trl_private.py` checks the installed libraries
against this table (a missing or changed member fails one fast test that names it), and checks that
rlft's source uses no private TRL / transformers name missing from it. Public methods rlft overrides
with its own parameter list are listed too: TRL calls them with those parameters.

Plain data: importing this module imports no torch, transformers or TRL.
"""

from __future__ import annotations

from dataclasses import dataclass

OVERRIDE = "method overridden"   # rlft's method replaces the library's, which calls it with `params`
CALL = "method called"           # rlft calls it with `params` (positionally or by name); the rest must have defaults
ATTRIBUTE = "attribute"          # read or written on the library's object; set in the owner's own code
MARKER = "marker read"           # set by rlft on objects; the owner module's code reads it by this name


@dataclass(frozen=True)
class Member:
    owner: str                              # importable dotted path of the class that defines it
    name: str
    kind: str                               # OVERRIDE | CALL | ATTRIBUTE
    params: tuple[str, ...] | None = None   # methods: parameter names after self; None = rlft passes *args, **kwargs
    used_in: str = ""                       # where rlft relies on it

    @property
    def qualname(self) -> str:
        return f"{self.owner}.{self.name}"


GRPO = "trl.GRPOTrainer"
DPO = "trl.DPOTrainer"
SFT = "trl.SFTTrainer"
ORPO = "trl.experimental.orpo.ORPOTrainer"
TRAINER = "transformers.Trainer"
VLLM_GENERATION = "trl.generation.vllm_generation.VLLMGeneration"

MEMBERS: tuple[Member, ...] = (
    # --- GRPO (rlft/trainers/grpo.py, grpo_async.py) -------------------------------------------------
    Member(GRPO, "_calculate_rewards", OVERRIDE, ("inputs", "prompts", "completions", "completion_ids_list"),
           "trainers/grpo_rewards.py: scores through rlft's reward suite"),
    Member(GRPO, "_generate_and_score_completions", OVERRIDE, ("inputs",),
           "trainers/grpo.py: rlft's advantages after TRL's; grpo_async.py calls it per chunk"),
    Member(GRPO, "_compute_loss", OVERRIDE, ("model", "inputs"),
           "trainers/grpo.py: sampler-vs-learner KL around TRL's loss"),
    Member(GRPO, "_get_per_token_logps_and_entropies", OVERRIDE, None,
           "trainers/grpo.py: captures the loss's log-probs (passes every argument through)"),
    Member(GRPO, "_get_per_token_logps_and_entropies", CALL,
           ("model", "input_ids", "attention_mask", "logits_to_keep", "batch_size"),
           "trainers/grpo.py (reference log-probs), grpo_async.py (sampler log-probs)"),
    Member(GRPO, "_prepare_inputs", OVERRIDE, ("generation_batch",),
           "trainers/grpo.py: whole groups per substep; grpo_async.py: chunks from the sampler"),
    Member(GRPO, "_generate_single_turn", OVERRIDE,
           ("prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"),
           "trainers/grpo_async.py: hands TRL the sampler's completions; also called on the sampler's view"),
    Member(GRPO, "_tokenize_prompts", CALL, ("prompts",), "trainers/grpo_async.py: the sampler's prompt ids"),
    Member(GRPO, "_get_train_sampler", CALL, (), "trainers/grpo_async.py: the same prompt order as TRL"),
    Member(GRPO, "_metrics", ATTRIBUTE, used_in="trainers/grpo.py, grpo_async.py: rlft's metrics appended; "
                                                "the sampler's view gets its own"),
    Member(GRPO, "_step", ATTRIBUTE, used_in="trainers/grpo.py, grpo_async.py: read, which substep of a batch"),
    Member(GRPO, "_buffered_inputs", ATTRIBUTE, used_in="trainers/grpo.py, grpo_async.py: read and written"),
    Member(GRPO, "_tokenizer", ATTRIBUTE, used_in="trainers/grpo_async.py: read; the sampler's view gets a copy"),
    Member(GRPO, "log", OVERRIDE, ("logs", "start_time"), "trainers/grpo_async.py: dropped-chunk count"),
    # --- TRL's colocated vLLM engine on vLLM's CPU build (rlft/trainers/vllm_colocate.py) ----------------
    Member(VLLM_GENERATION, "_iter_named_params", CALL, (),
           "trainers/vllm_colocate.py: the policy's weights (LoRA merged) under vLLM's names, for reload_weights"),
    Member(VLLM_GENERATION, "sync_weights", OVERRIDE, (),
           "trainers/vllm_colocate.py: replaced on the instance by the CPU build's in-place reload"),
    # --- DPO, ORPO, SFT ----------------------------------------------------------------------------
    Member(DPO, "_prepare_dataset", OVERRIDE, ("dataset", "processing_class", "args", "dataset_name"),
           "trainers/dpo.py: max_prompt_length"),
    Member(ORPO, "tokenize_row", OVERRIDE, ("feature", "model"), "trainers/orpo_compat.py: max_prompt_length"),
    Member(SFT, "_set_signature_columns_if_needed", OVERRIDE, (), "trainers/sft.py: keeps AWR's weight column"),
    Member(SFT, "_signature_columns", ATTRIBUTE, used_in="trainers/sft.py: read and written"),
    Member(SFT, "_metrics", ATTRIBUTE, used_in="trainers/sft.py: AWR's entropy and nll appended"),
    Member(SFT, "compute_loss", OVERRIDE, ("model", "inputs", "return_outputs", "num_items_in_batch"),
           "trainers/sft.py: AWR's weighted loss"),
    # --- transformers.Trainer (rlft/trainers/ppo.py, runtime/) ---------------------------------------
    Member(TRAINER, "_save_checkpoint", CALL, ("model", "trial"),
           "trainers/ppo.py, runtime/context.py: checkpoint now"),
    Member(TRAINER, "_save", CALL, ("output_dir", "state_dict"),
           used_in="runtime/final.py (FSDP full fine-tuning: the gathered weights written as a plain model)"),
    Member(TRAINER, "_load_from_checkpoint", OVERRIDE, ("resume_from_checkpoint", "model"),
           "trainers/value_head_io.py: adapter + value head"),
    Member(TRAINER, "_load_from_checkpoint", CALL, ("resume_from_checkpoint",),
           "runtime/final.py: redo an interrupted final save"),
    Member(TRAINER, "_load_optimizer_and_scheduler", CALL, ("checkpoint",), "trainers/value_head_io.py: resume"),
    Member(TRAINER, "_load_rng_state", CALL, ("checkpoint",), "trainers/value_head_io.py: resume"),
    Member(TRAINER, "save_model", OVERRIDE, ("output_dir", "_internal_call"),
           "trainers/value_head_io.py: adapter + value head"),
    # --- FSDP2 (runtime/sharding.py, models/sharded.py) --------------------------------------------------
    Member("accelerate.state.PartialState", "_shared_state", ATTRIBUTE,
           used_in="runtime/sharding.py: the promoted FSDP type, as accelerate stores it for GPU types"),
    Member("transformers.distributed.fsdp", "_is_fsdp_managed_module", MARKER,
           used_in="models/sharded.py: set on a sharded model so generate() keeps the ranks in step"),
    # --- elsewhere ----------------------------------------------------------------------------------
    Member("transformers.PretrainedConfig", "_name_or_path", ATTRIBUTE,
           used_in="posttrain/export.py: written, the merged model's base name"),
    Member("torch.optim.lr_scheduler.LRScheduler", "_last_lr", ATTRIBUTE,
           used_in="monitor/callbacks.py: written with a changed learning rate on resume"),
)


def listed(name: str) -> list[Member]:
    """The table's entries for one member name (any owner, any kind)."""
    return [m for m in MEMBERS if m.name == name]
