"""rlft's PPO trainer on the tiny model, below the CLI: its update against hand-built losses."""

import pytest
import torch


def _trainer(tmp_path, *overrides, separate=False):
    from peft import get_peft_model

    from rlft.config import load_config
    from rlft.models.loading import load_model_and_tokenizer, lora_config
    from rlft.models.value_head import PolicyWithValueHead, hidden_size_of
    from rlft.rewards import build_reward_suite
    from rlft.stages.ppo.runner import training_arguments
    from rlft.stages.common.prompt_data import load_prompt_dataset
    from rlft.trainers.ppo import RlftPPOTrainer

    cfg, _, _ = load_config("ppo", "cpu", ["configs/examples/ppo_demo.yaml"],
                            ["ppo.batch_size=8", "ppo.mini_batch_size=8", "ppo.ppo_epochs=1", "ppo.max_tokens=6",
                             "train.max_grad_norm=1.0e9", *overrides])
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(cfg)
    critic = None
    if separate:
        from rlft.config.load_plan import load_plan
        from rlft.stages.common.episode_setup import separate_critic

        critic = separate_critic(cfg, load_plan(cfg))
    wrapped = PolicyWithValueHead(get_peft_model(model, lora_config(cfg, model)), hidden_size_of(model), critic)
    torch.nn.init.normal_(wrapped.value_head.weight, std=0.05)  # non-zero values: the value path is exercised
    trainer = RlftPPOTrainer(model=wrapped, args=training_arguments(cfg, str(tmp_path)), processing_class=tok,
                             cfg=cfg, train_rows=load_prompt_dataset(cfg).to_list(),
                             reward_suite=build_reward_suite([vars(r) for r in cfg.rewards]))
    trainer.create_optimizer_and_scheduler(num_training_steps=1)
    trainer.state = trainer._fresh_state()
    return trainer


def _grads_of_update(trainer, batch):
    """The gradients the update's optimizer step would apply (the step itself is skipped)."""
    captured = {}
    params = [p for p in trainer.model.parameters() if p.requires_grad]

    def capture(*args, **kwargs):
        for i, p in enumerate(params):
            captured[i] = None if p.grad is None else p.grad.detach().clone()
    trainer.optimizer.step = capture
    metrics = trainer.optimize(batch)
    return [captured[i] for i in range(len(params))], params, metrics


def _reference_grads(trainer, batch, params, loss_fn):
    trainer.model.zero_grad(set_to_none=True)
    logp, values, logits, _ = trainer._forward(trainer.model, batch)
    loss_fn(logp, values, logits).backward()
    return [None if p.grad is None else p.grad.detach().clone() for p in params]


def _close(a, b):
    """Same gradients; None (not reached) counts as zero (a term with coefficient 0 gives zeros)."""
    def z(x, like):
        return torch.zeros_like(like) if x is None else x
    return all(x is None and y is None or torch.allclose(z(x, y), z(y, x), atol=1e-6, rtol=1e-4) for x, y in zip(a, b))


def test_first_update_equals_plain_policy_gradient(tmp_path):
    """ppo_epochs=1, one minibatch, vf_coef = ent_coef = 0: the ratio is 1 and the clip never acts, so the
    update's gradient is that of -mean(A * log pi) over the sampled tokens."""
    trainer = _trainer(tmp_path, "ppo.vf_coef=0", "ppo.ent_coef=0", "ppo.init_kl_coef=0")
    batch = trainer.rollout(0)
    got, params, metrics = _grads_of_update(trainer, batch)
    assert metrics["clipfrac"] == 0.0 and metrics["ratio"] == pytest.approx(1.0)
    mask, adv = batch.mask_BT, batch.advantages_BT
    want = _reference_grads(trainer, batch, params, lambda logp, v, lg: -(adv * logp * mask).sum() / mask.sum())
    assert any(g is not None and g.abs().sum() > 0 for g in got)
    assert _close(got, want)


def test_value_and_entropy_terms_enter_with_their_coefficients(tmp_path):
    from rlft.algos import entropy_from_logits

    trainer = _trainer(tmp_path, "ppo.vf_coef=0.5", "ppo.ent_coef=0.01", "ppo.init_kl_coef=0.05")
    batch = trainer.rollout(0)
    assert batch.metrics["kl_policy_ref"] == pytest.approx(0.0, abs=1e-6)  # adapter starts at zero
    got, params, _ = _grads_of_update(trainer, batch)
    mask, adv, ret = batch.mask_BT, batch.advantages_BT, batch.returns_BT

    def loss(logp, values, logits):
        pg = -(adv * logp * mask).sum() / mask.sum()
        vf = 0.5 * (((values * mask - ret) ** 2) * mask).sum() / mask.sum()  # unclipped at the rollout values
        ent = (entropy_from_logits(logits) * mask).sum() / mask.sum()
        return pg + 0.5 * vf - 0.01 * ent
    want = _reference_grads(trainer, batch, params, loss)
    head = [i for i, p in enumerate(params) if p is trainer.model.value_head.weight][0]
    assert got[head].abs().sum() > 0  # the value head trains
    assert _close(got, want)


def test_a_minibatch_selects_rows_of_every_per_row_field():
    from rlft.trainers.ppo import PPOBatch

    B, L, T = 4, 5, 3
    ids = torch.arange(B * L).view(B, L)
    batch = PPOBatch(input_ids_BL=ids, attention_mask_BL=torch.ones(B, L), position_ids_BL=ids % L, prompt_len=2,
                     mask_BT=torch.ones(B, T), logp_sampler_BT=-torch.rand(B, T), rows=[{"i": i} for i in range(B)],
                     episodes=list("abcd"), advantages_BT=torch.arange(B * T, dtype=torch.float).view(B, T),
                     metrics={"reward": 1.0})
    mb = batch.select(torch.tensor([3, 1]))
    assert mb.input_ids_BL.tolist() == [ids[3].tolist(), ids[1].tolist()] and mb.prompt_len == 2
    assert torch.equal(mb.advantages_BT, batch.advantages_BT[[3, 1]])
    assert torch.equal(mb.logp_sampler_BT, batch.logp_sampler_BT[[3, 1]])
    assert mb.rows == [{"i": 3}, {"i": 1}] and mb.episodes == ["d", "b"]
    assert mb.returns_BT is None and mb.rollouts is None and mb.metrics == {}  # the update's own records stay behind


def _snapshot(params):
    return [q.detach().clone() for q in params]


def test_a_critic_warmup_update_trains_the_value_head_alone(tmp_path):
    """ppo.critic_warmup=1: the first update moves the value head, not the policy (LoRA), and leaves the policy's
    optimizer state empty; the next update trains both."""
    trainer = _trainer(tmp_path, "ppo.critic_warmup=1", "ppo.ent_coef=0.01")
    head = list(trainer.model.value_head.parameters())
    policy = trainer.model.policy_parameters()
    assert policy and head and not {id(q) for q in policy} & {id(q) for q in head}
    before_policy, before_head = _snapshot(policy), _snapshot(head)
    assert trainer.critic_warming_up
    trainer.optimize(trainer.rollout(0))
    assert all(torch.equal(a, q) for a, q in zip(before_policy, policy))
    assert any(not torch.equal(a, q) for a, q in zip(before_head, head))
    assert all(not trainer.optimizer.state.get(q) for q in policy)  # no moment estimates from the value loss
    assert all(trainer.optimizer.state.get(q) for q in head)
    trainer.state.global_step = 1
    assert not trainer.critic_warming_up
    trainer.optimize(trainer.rollout(1))
    assert any(not torch.equal(a, q) for a, q in zip(before_policy, policy))


def test_value_init_sets_the_bias_to_the_first_batch_mean_return(tmp_path):
    """ppo.value_init=first_batch_mean: update 0 sets the head's bias to the batch's mean discounted return, the
    batch's values shifted with it (as a fresh forward pass gives them); later updates leave it to training."""
    trainer = _trainer(tmp_path, "ppo.value_init=first_batch_mean", "ppo.init_kl_coef=0", "ppo.gamma=1.0")
    with torch.no_grad():
        trainer.model.value_head.bias.fill_(3.0)  # not the target: the bias is set, not added to
    batch = trainer.rollout(0)
    bias = float(trainer.model.value_head.bias.detach())
    mask = batch.mask_BT
    scores = torch.tensor([t for t in batch.scores.total])
    # gamma 1, no KL: every action token's target is its episode's score; tokens weigh by completion length
    want = float((scores * mask.sum(1)).sum() / mask.sum())
    assert bias == pytest.approx(want, abs=1e-5)
    with torch.no_grad():
        _, values, _, _ = trainer._forward(trainer.model, batch)
    assert torch.allclose(values * mask, batch.values_old_BT, atol=1e-5)
    trainer.optimize(batch)
    trainer.state.global_step = 1
    moved = float(trainer.model.value_head.bias.detach())
    trainer.rollout(1)
    assert float(trainer.model.value_head.bias.detach()) == moved


@pytest.mark.parametrize("stop_kl, steps", [(None, 8), (1.0e9, 8), (1.0e-12, 1)])
def test_early_stop_kl_ends_the_update_at_a_step_boundary(tmp_path, stop_kl, steps):
    """ppo.early_stop_kl: the first step always runs; once a step's first minibatch is that far from the sampling
    policy the update's passes stop, the skipped steps still advance the lr schedule, and `early_stop` says what
    share was skipped (absent when the key is off)."""
    extra = [] if stop_kl is None else [f"ppo.early_stop_kl={stop_kl}"]
    trainer = _trainer(tmp_path, "ppo.mini_batch_size=4", "ppo.ppo_epochs=4", "train.learning_rate=1e-2", *extra)
    trainer.create_optimizer_and_scheduler(num_training_steps=8)
    calls = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: (calls.append(1), step(*a, **k))[1]
    metrics = trainer.optimize(trainer.rollout(0))
    assert len(calls) == steps
    assert trainer.lr_scheduler.last_epoch == 8  # the schedule counts the planned steps either way
    if stop_kl is None:
        assert "early_stop" not in metrics
    else:
        assert metrics["early_stop"] == pytest.approx((8 - steps) / 8)


def test_a_separate_critic_takes_the_value_loss_and_the_policy_the_rest(tmp_path):
    """ppo.value_model=separate: the value loss alone gives gradients to the critic's LoRA and the head and none to
    the policy's; the policy loss and entropy alone give gradients to the policy's LoRA and none to the critic's."""
    from rlft.algos import entropy_from_logits
    from rlft.trainers.grad_clip import clip_each_part

    trainer = _trainer(tmp_path, "ppo.init_kl_coef=0", separate=True)
    model = trainer.model
    critic = model.critic_parameters()
    policy = trainer.model.policy_parameters()
    critic_lora = [q for q in model.critic.parameters() if q.requires_grad]
    assert critic_lora and policy and not {id(q) for q in policy} & {id(q) for q in critic}
    assert not {id(q) for q in model.policy.parameters()} & {id(q) for q in critic_lora}  # two copies
    batch = trainer.rollout(0)
    mask, adv, ret = batch.mask_BT, batch.advantages_BT, batch.returns_BT

    def grads(loss_fn):
        model.zero_grad(set_to_none=True)
        logp, values, logits, _ = trainer._forward(model, batch)
        loss_fn(logp, values, logits).backward()
        return ([0.0 if q.grad is None else float(q.grad.abs().sum()) for q in policy],
                [0.0 if q.grad is None else float(q.grad.abs().sum()) for q in critic])

    p, c = grads(lambda logp, values, logits: (((values * mask - ret) ** 2) * mask).sum() / mask.sum())
    assert sum(p) == 0 and sum(c) > 0 and sum(c[2:]) > 0  # the critic's LoRA, not only the head
    p, c = grads(lambda logp, values, logits: (-(adv * logp * mask).sum()
                                               - 0.01 * (entropy_from_logits(logits) * mask).sum()) / mask.sum())
    assert sum(p) > 0 and sum(c) == 0
    # clipping: each group at train.max_grad_norm on its own, so a large value gradient leaves the policy's as it is
    model.zero_grad(set_to_none=True)
    logp, values, logits, _ = trainer._forward(model, batch)
    (-(adv * logp * mask).sum() / mask.sum() + 1e3 * (((values * mask - ret) ** 2) * mask).sum()).backward()
    norm = torch.nn.utils.get_total_norm
    p_norm, c_norm = float(norm([q.grad for q in policy if q.grad is not None])), float(norm(
        [q.grad for q in critic]))
    assert c_norm > 10 * p_norm > 0
    before = _snapshot([q.grad for q in policy if q.grad is not None])
    trainer.args.max_grad_norm = 2 * p_norm
    total = clip_each_part(trainer.accelerator, model, trainer.args.max_grad_norm)
    assert total == pytest.approx((p_norm ** 2 + c_norm ** 2) ** 0.5, rel=1e-4)
    assert all(torch.equal(a, q.grad) for a, q in zip(before, [q for q in policy if q.grad is not None]))
    assert float(norm([q.grad for q in critic])) == pytest.approx(2 * p_norm, rel=1e-3)
    trainer.optimize(batch)  # one update runs


def test_a_separate_critic_is_saved_and_restored_with_the_value_head(tmp_path):
    from safetensors.torch import load_file

    from rlft.models.value_head import VALUE_HEAD_FILE

    trainer = _trainer(tmp_path, separate=True)
    model = trainer.model
    with torch.no_grad():
        for q in model.critic_parameters():
            q.normal_(std=0.1)
    saved = _snapshot(model.critic_parameters())
    model.save_value_head(tmp_path)
    keys = load_file(str(tmp_path / VALUE_HEAD_FILE)).keys()
    assert {"weight", "bias"} <= keys and any(k.startswith("critic.") and "lora_" in k for k in keys)
    with torch.no_grad():
        for q in model.critic_parameters():
            q.zero_()
    model.load_value_head(tmp_path)
    assert all(torch.equal(a, q) for a, q in zip(saved, model.critic_parameters()))
    shared = _trainer(tmp_path / "shared")
    with pytest.raises(ValueError, match="ppo.value_model"):
        shared.model.load_value_head(tmp_path)


def _trainable(trainer):
    return [q.detach().clone() for q in trainer.model.parameters() if q.requires_grad]


@pytest.mark.parametrize("epochs_mini", [(4, 4), (1, 8)])
def test_rollback_kl_undoes_the_step_that_crosses_it(tmp_path, epochs_mini):
    """ppo.rollback_kl: a bound every step crosses undoes the update's first step (checked on the next step's first
    minibatch, or after the last step when there is one): weights and Adam's state as before the update, the
    learning rate halved (in the scheduler's base_lrs, which checkpoints keep), the schedule still at its planned
    length, `rollback` 1."""
    epochs, mini = epochs_mini
    planned = epochs * 8 // mini
    trainer = _trainer(tmp_path, f"ppo.mini_batch_size={mini}", f"ppo.ppo_epochs={epochs}",
                       "train.learning_rate=1e-2", "ppo.rollback_kl=1e-12")
    trainer.create_optimizer_and_scheduler(num_training_steps=planned)
    base = list(trainer.lr_scheduler.base_lrs)
    before = _trainable(trainer)
    metrics = trainer.optimize(trainer.rollout(0))
    assert metrics["rollback"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, _trainable(trainer)))
    assert not trainer.optimizer.state  # the first step's moments are gone with it
    assert trainer.lr_scheduler.base_lrs == [lr / 2 for lr in base]
    assert trainer.lr_scheduler.last_epoch == planned
    assert metrics["learning_rate"] == pytest.approx(trainer.lr_scheduler.get_last_lr()[0])


def test_rollback_kl_within_the_bound_changes_nothing(tmp_path):
    """A bound no step reaches: the same weights, optimizer state and learning rate as the update without the key."""
    runs = []
    for extra in ([], ["ppo.rollback_kl=1e9"]):
        trainer = _trainer(tmp_path, "ppo.mini_batch_size=4", "ppo.ppo_epochs=2", "train.learning_rate=1e-2", *extra)
        trainer.create_optimizer_and_scheduler(num_training_steps=4)
        metrics = trainer.optimize(trainer.rollout(0))
        runs.append((_trainable(trainer), metrics, list(trainer.lr_scheduler.base_lrs)))
    (w0, m0, lr0), (w1, m1, lr1) = runs
    assert all(torch.equal(a, b) for a, b in zip(w0, w1)) and lr0 == lr1
    assert m1.pop("rollback") == 0.0 and m1.pop("frac_steps_undone") == 0.0 and m0 == m1


def test_step_rollback_restores_the_state_before_the_crossing_step():
    """StepRollback on a plain model and AdamW: a step within the bound stays, the next one past it is undone to
    the weights and moments after the first, and the learning rate halves (param groups and scheduler)."""
    from transformers import get_linear_schedule_with_warmup

    from rlft.trainers.step_rollback import StepRollback

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = get_linear_schedule_with_warmup(opt, 0, 10)
    guard = StepRollback(list(model.parameters()), opt, sched, limit=0.5)

    def step():
        model(torch.randn(4, 3)).pow(2).sum().backward()
        guard.before_step()
        opt.step()
        sched.step()
        opt.zero_grad()

    step()
    assert guard.check(0.5) and not guard.undone  # at the bound: kept
    kept = [q.detach().clone() for q in model.parameters()]
    moments = [{k: v.clone() for k, v in opt.state[q].items()} for q in model.parameters()]
    step()
    assert not torch.equal(kept[0], model.weight)
    assert not guard.check(0.51) and guard.undone == 1 and not guard.pending
    assert all(torch.equal(a, b) for a, b in zip(kept, model.parameters()))
    for q, saved in zip(model.parameters(), moments):
        assert all(torch.equal(saved[k], opt.state[q][k]) for k in saved)
    assert sched.base_lrs == [0.05] and opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.8 / 2)
    assert sched.get_last_lr() == [opt.param_groups[0]["lr"]]
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05 * 0.7)  # the schedule goes on from the halved rate
