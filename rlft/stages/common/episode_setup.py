"""What the two stages that train on episodes with rlft's own PPO loop (PPO, and GRPO with `env.name`) set up
alike: the environment with its failure guard and task rows, and the policy with a value head beside its KL
reference. Shared here so neither stage folder imports the other."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlft.config.compose import Composed
from rlft.errors import RunError

if TYPE_CHECKING:
    from rlft.config.load_plan import LoadPlan
    from rlft.config.schema import RlftConfig


def env_setup(cfg: RlftConfig, composed: Composed):
    """(env factory, failure guard, train rows, eval rows) for multi-turn episodes; every problem is a
    RunError (exit 2) raised before the run folder exists. The factory builds one SafeEnv per call."""
    from rlft.envs import EnvResolveError, resolve_env_class
    from rlft.envs.safe import EnvGuard, SafeEnvFactory
    from rlft.rewards.registry import module_search_dir

    e = cfg.env
    try:
        cls = resolve_env_class(e.name, module_search_dir(e.name, composed.dir_of("env")) or composed.dir_of("env"))
    except EnvResolveError as exc:
        raise RunError(f"env.name: {exc}") from None
    try:
        cls(**e.kwargs)  # bad kwargs fail here, with the env's own message
    except Exception as exc:  # noqa: BLE001 - user code: any error is a config problem
        raise RunError(f"env.kwargs: {e.name} could not be built with {e.kwargs}: "
                       f"{type(exc).__name__}: {exc}") from None

    def rows_of(path: str | None, source: str) -> list[dict]:
        if not path:
            return [{"task_id": i} for i in range(e.num_tasks)]
        from rlft.data import DataError
        from rlft.data.load import load_table

        try:
            rows = load_table(path).to_list()
        except DataError as exc:
            raise RunError(str(exc)) from None
        if not rows:
            raise RunError(f"{source}: {path} has no rows")
        return [{"prompt_id": i, **r} for i, r in enumerate(rows)]

    train = rows_of(cfg.data.train, "data.train")
    if cfg.data.max_samples:
        train = train[:cfg.data.max_samples]
    evals = (rows_of(cfg.data.eval, "data.eval") if cfg.data.eval else train)[:cfg.data.eval_prompts]

    guard = EnvGuard(e.name, cfg.monitor.max_reward_failure_fraction)

    factory = SafeEnvFactory(cls, dict(e.kwargs), e.name, e.step_timeout_s, e.failure_reward, guard)
    return factory, guard, train, evals


def _trainable_model(plan: LoadPlan, checkpointing: bool):
    """(the starting model with LoRA, or all its weights trainable; the bare model)."""
    from peft import get_peft_model

    from rlft.models.loading import peft_config, policy

    model = policy(plan)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    peft_cfg = peft_config(plan, model)
    return (get_peft_model(model, peft_cfg) if peft_cfg is not None else model), model


def separate_critic(cfg: RlftConfig, plan: LoadPlan):
    """A critic model of its own (`ppo.value_model: separate`): a second copy of the starting model (`plan`: the
    config's load plan), with its own LoRA of the same settings (or all its weights trained)."""
    critic, model = _trainable_model(plan, cfg.train.gradient_checkpointing)
    out, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if out is not None and emb is not None and out.weight is not emb.weight:
        # the value head reads the hidden state, so an untied LM head gets no gradient (and DDP wants none unused)
        out.requires_grad_(False)
    return critic


def policy_with_value_head(cfg: RlftConfig, plan: LoadPlan, kl_coef: float, separate: bool = False):
    """(the policy with LoRA and a value head on its last hidden state, or with `separate` on a critic model of its
    own; the frozen KL reference or None when the adapter-disabled policy is it), loaded from `plan` (the config's
    load plan)."""
    from rlft.models import loading
    from rlft.models.value_head import PolicyWithValueHead, hidden_size_of

    policy, model = _trainable_model(plan, cfg.train.gradient_checkpointing)
    critic = separate_critic(cfg, plan) if separate else None
    wrapped = PolicyWithValueHead(policy, hidden_size_of(model), critic)
    ref = loading.reference(plan) if kl_coef > 0 else None
    if ref is None and not hasattr(policy, "disable_adapter") and kl_coef > 0:
        # full fine-tuning: no adapter to disable, so a frozen copy of the starting weights
        ref = loading.policy(plan).eval().requires_grad_(False)
    return wrapped, ref
