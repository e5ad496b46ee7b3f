"""Health rules that act, with the warning-sign thresholds of the staged guide (section 7) and the
sampler/learner KL bound of the RL guides (stable below 0.01).

Each rule looks at one metrics record and fires at a level; the level maps to an action from
`monitor.*`: `warn` (log), `stop` (checkpoint and exit non-zero) or `rollback` (reload the last
good checkpoint, lower the learning rate and continue, at most `monitor.max_rollbacks` times).
Every firing goes to health.jsonl and the console.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable

from transformers import TrainerCallback

from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec
from rlft.monitor.learning_rate import scale_learning_rate
from rlft.rundir.folder import RunDir, checkpoint_step


class RunStopped(Exception):
    """A health rule with action `stop` fired."""


@dataclass
class Firing:
    rule: str
    level: str      # warning | critical
    metric: str
    value: float | None
    threshold: float | None
    message: str


def _bad(x) -> bool:
    return x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x)))


# One function per rule family, by the name a StageSpec lists in `health_rules`: each reads one
# metrics record and the `monitor:` thresholds and returns the firings (none, usually).
def _loss_nan(r: dict, m) -> list[Firing]:
    loss = r.get("loss", 0.0)
    if "loss" in r and _bad(loss) and loss is not None:
        return [Firing("loss_nan", "critical", "loss", loss, None, "loss is NaN/Inf")]
    return []


def _grad_norm(r: dict, m) -> list[Firing]:
    gn = r.get("grad_norm")
    if isinstance(gn, float) and math.isnan(gn):
        return [Firing("grad_norm_nan", "critical", "grad_norm", gn, None, "gradient norm is NaN")]
    if isinstance(gn, (int, float)) and gn > m.grad_norm_critical:
        return [Firing("grad_norm_critical", "critical", "grad_norm", gn, m.grad_norm_critical,
                       "gradient norm exploding: lower the learning rate or max_grad_norm")]
    if isinstance(gn, (int, float)) and gn > m.grad_norm_warn:
        return [Firing("grad_norm_high", "warning", "grad_norm", gn, m.grad_norm_warn, "gradient norm high")]
    return []


def _kl_policy_ref(r: dict, m) -> list[Firing]:
    # the monitor adds the mean of the last `monitor.kl_window` values; a lone record is read as it is
    kl = r.get("kl_policy_ref_window", r.get("kl_policy_ref"))
    over = f" (mean of the last {m.kl_window} steps)" if "kl_policy_ref_window" in r and m.kl_window > 1 else ""
    if isinstance(kl, (int, float)) and kl > m.kl_critical:
        return [Firing("kl_critical", "critical", "kl_policy_ref", kl, m.kl_critical,
                       f"policy drifting from the reference{over}: raise the KL coefficient or lower the learning "
                       "rate")]
    if isinstance(kl, (int, float)) and kl > m.kl_warn:
        return [Firing("kl_high", "warning", "kl_policy_ref", kl, m.kl_warn, f"KL to the reference is high{over}")]
    return []


def _entropy_collapse(r: dict, m) -> list[Firing]:
    ent = r.get("entropy")
    if isinstance(ent, (int, float)) and ent < m.entropy_critical:
        return [Firing("entropy_collapse", "entropy", "entropy", ent, m.entropy_critical,
                       "policy entropy collapsed: outputs are becoming deterministic (mode collapse risk)")]
    return []


def _all_groups_constant(r: dict, m) -> list[Firing]:
    fc = r.get("frac_constant_groups")
    unscored = r.get("frac_unscored")
    if isinstance(unscored, (int, float)) and unscored >= 1.0:  # constant because nothing was scored
        errors = {k[len("rewards/"):-len("/errors")]: int(v) for k, v in r.items()
                  if k.startswith("rewards/") and k.endswith("/errors") and isinstance(v, (int, float)) and v}
        total = sum(errors.values())
        detail = ", ".join(f"{name}: {n}" for name, n in errors.items())
        return [Firing("rewards_all_failed", "warning", "frac_unscored", unscored, 1.0,
                       f"every reward call failed: no completion got a score ({total} failure(s): "
                       f"{detail or 'none counted'}); "
                       f"the first traceback of each reward is above; fix the reward function")]
    if isinstance(fc, (int, float)) and fc >= 1.0:
        return [Firing("all_groups_constant", "warning", "frac_constant_groups", fc, 1.0,
                       "every group got identical rewards: no gradient signal, so loss 0 is expected; "
                       "make the reward more graded or the task easier/harder")]
    return []


def _sampler_learner_mismatch(r: dict, m) -> list[Firing]:
    kst = r.get("kl_sample_train_v2")
    if r.get("reused_generation") is True:
        return []  # a later substep/epoch of one generation: the policy moved away from its samples by design
    if isinstance(kst, (int, float)) and kst > m.kl_sample_train_warn:
        return [Firing("sampler_learner_mismatch", "warning", "kl_sample_train_v2", kst, m.kl_sample_train_warn,
                       "sampler and learner disagree on freshly sampled completions (kl_sample_train_v2 above "
                       f"{m.kl_sample_train_warn:g}): the sampler lags the learner or computes differently "
                       "(precision, vLLM); training is off-policy")]
    return []


def _awr_ess(r: dict, m) -> list[Firing]:
    ess = r.get("ess")
    if isinstance(ess, (int, float)) and ess < m.ess_warn:
        return [Firing("awr_ess", "warning", "ess", ess, m.ess_warn,
                       "AWR weights collapsed onto a few samples (low effective sample size): lower awr.advantage_beta "
                       "or sample more per prompt")]
    return []


def _truncated(r: dict, m) -> list[Firing]:
    frac = r.get("frac_truncated")
    if not isinstance(frac, (int, float)) or _bad(frac) or frac <= m.truncated_warn:
        return []
    what = "turns" if "episode_return" in r else "completions"
    key = f"{r['stage']}.max_tokens" if r.get("stage") else "max_tokens"  # every sampling stage names it so
    return [Firing("truncated", "warning", "frac_truncated", frac, m.truncated_warn,
                   f"{frac:.0%} of sampled {what} hit the token budget without ending: raise {key}, or add a length "
                   f"penalty (the overlong_penalty reward)")]


def _all_masked_truncated(r: dict, m) -> list[Firing]:
    frac = r.get("frac_masked_truncated")  # logged only with <stage>.mask_truncated on
    if not isinstance(frac, (int, float)) or _bad(frac) or frac < 1.0:
        return []
    stage = f"{r['stage']}." if r.get("stage") else ""
    what = "episode held a turn that" if "episode_return" in r else "completion"
    return [Firing("all_masked_truncated", "warning", "frac_masked_truncated", frac, 1.0,
                   f"every {what} reached {stage}max_tokens without ending, so {stage}mask_truncated left the whole "
                   f"step out of the loss: nothing trains (loss and grad norm 0); raise {stage}max_tokens, or turn "
                   f"{stage}mask_truncated off")]


def _all_steps_undone(r: dict, m) -> list[Firing]:
    frac = r.get("frac_steps_undone")  # logged only with ppo.rollback_kl on
    if not isinstance(frac, (int, float)) or _bad(frac) or frac < 1.0:
        return []
    lr = r.get("learning_rate")
    now = f" (the learning rate, halved at each undo, is now {lr:.3g})" if isinstance(lr, (int, float)) else ""
    return [Firing("all_steps_undone", "warning", "frac_steps_undone", frac, 1.0,
                   f"every optimizer step of this update took the policy past ppo.rollback_kl and was undone: nothing "
                   f"trained{now}; raise ppo.rollback_kl (0.01-0.02 typical) or lower train.learning_rate")]


GAP_WINDOW = 5  # training steps averaged at each end for the train-up/eval-flat rule


def train_eval_gap(train_rewards: list[float], eval_start: float | None, eval_now: float | None,
                   threshold: float) -> tuple[float, float] | None:
    """(training gain, eval gain) when the training reward rose by more than `threshold` (mean of the last
    GAP_WINDOW steps vs the first) while the held-out eval reward gained less than a quarter of it; else None.
    The first defence against reward hacking: the policy learns what the reward pays for on the training
    prompts, not the task, and fresh prompts show it."""
    if threshold <= 0 or eval_start is None or eval_now is None or len(train_rewards) < 2 * GAP_WINDOW:
        return None
    first = sum(train_rewards[:GAP_WINDOW]) / GAP_WINDOW
    last = sum(train_rewards[-GAP_WINDOW:]) / GAP_WINDOW
    train_gain, eval_gain = last - first, eval_now - eval_start
    if train_gain > threshold and eval_gain < 0.25 * train_gain:
        return train_gain, eval_gain
    return None


RULES: dict[str, Callable[[dict, Any], list[Firing]]] = {
    "loss_nan": _loss_nan,
    "grad_norm": _grad_norm,
    "kl_policy_ref": _kl_policy_ref,
    "entropy_collapse": _entropy_collapse,
    "all_groups_constant": _all_groups_constant,
    "sampler_learner_mismatch": _sampler_learner_mismatch,
    "awr_ess": _awr_ess,
    "truncated": _truncated,
    "all_masked_truncated": _all_masked_truncated,
    "all_steps_undone": _all_steps_undone,
}


def evaluate_rules(record: dict, cfg: RlftConfig) -> list[Firing]:
    """Pure: the rules of the stage's StageSpec that fire on one metrics record, in the spec's order."""
    out: list[Firing] = []
    for name in get_spec(cfg.stage).health_rules:
        out += RULES[name](record, cfg.monitor)
    return out


class HealthMonitor(TrainerCallback):
    def __init__(self, cfg: RlftConfig, run: RunDir, console):
        self.cfg, self.run, self.console = cfg, run, console
        self.rollbacks = 0
        self._announced: set[str] = set()
        self.trainer = None
        self.ctx = None
        self._initial_state = None
        self._train_rewards: list[float] = []  # the training reward of each step, for the train/eval gap
        self._gap_fired = False
        self._kls: list[float] = []  # the KL rules' window

    def attach(self, trainer, ctx) -> None:
        self.trainer, self.ctx = trainer, ctx

    def on_train_begin(self, args, state, control, **kwargs):
        if self.cfg.monitor.on_critical == "rollback" or self.cfg.monitor.on_warning == "rollback":
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            self._initial_state = {k: v.detach().clone() for k, v in model.state_dict().items()
                                   if "lora_" in k or not self.cfg.lora.enabled}

    def action_for(self, level: str) -> str:
        m = self.cfg.monitor
        return {"warning": m.on_warning, "critical": m.on_critical, "entropy": m.on_entropy_collapse}[level]

    def _gap(self, record: dict) -> list[Firing]:
        """The train-up/eval-flat rule: it needs the run's history, so it lives here rather than in RULES."""
        if "eval_reward" not in record:
            if isinstance(record.get("reward"), (int, float)) and not _bad(record["reward"]):
                self._train_rewards.append(float(record["reward"]))
            return []
        start = ((self.ctx.eval.get("start") or {}) if self.ctx is not None else {}).get("reward_mean")
        gap = train_eval_gap(self._train_rewards, start, record.get("eval_reward"), self.cfg.monitor.eval_gap_warn)
        if gap is None or self._gap_fired:
            return []
        self._gap_fired = True  # once a run: the report shows the curves
        train_gain, eval_gain = gap
        return [Firing("train_up_eval_flat", "warning", "eval_reward", record["eval_reward"], start,
                       f"training reward rose by {train_gain:.3g} since the start, the eval reward on held-out prompts "
                       f"by {eval_gain:+.3g}: the policy may be exploiting the reward (reward hacking) or overfitting "
                       f"the training prompts; compare the eval completions in the report")]

    def _with_kl_window(self, record: dict) -> dict:
        """The record with `kl_policy_ref_window`, the mean KL of its last `monitor.kl_window` logged steps."""
        kl = record.get("kl_policy_ref")
        if not isinstance(kl, (int, float)) or _bad(kl):
            return record
        self._kls = (self._kls + [float(kl)])[-self.cfg.monitor.kl_window:]
        return {**record, "kl_policy_ref_window": sum(self._kls) / len(self._kls)}

    def check(self, record: dict, control, write: bool = True) -> None:
        record = self._with_kl_window(record)
        for f in evaluate_rules(record, self.cfg) + self._gap(record):
            action = self.action_for(f.level)
            if action == "rollback" and self.rollbacks >= self.cfg.monitor.max_rollbacks:
                action = "stop"
            level = "critical" if f.level == "entropy" else f.level
            entry = {"step": record.get("step"), "rule": f.rule, "level": level, "metric": f.metric,
                     "value": None if _bad(f.value) else f.value, "threshold": f.threshold,
                     "action": action, "message": f.message}
            if write:
                with open(self.run.health, "a") as fh:
                    fh.write(json.dumps(entry) + "\n")
                self.console.alert(level)
                if f.rule not in self._announced or action != "warn":  # warnings: once on the console
                    self._announced.add(f.rule)
                    style = "bold red" if level == "critical" else "yellow"
                    again = " (further firings go to health.jsonl only)" if action == "warn" else ""
                    self.console.message(f"health [{level}] step {entry['step']}: {f.metric}={f.value:.4g} "
                                         f"({f.message}) -> {action}{again}", style)
            if action == "stop":
                raise RunStopped(f"{f.rule} at step {entry['step']} ({f.metric}={f.value})")
            if action == "rollback":
                self.rollback(entry["step"], write)

    def rollback(self, step, write: bool = True) -> None:
        """Reload the newest complete checkpoint's weights (or the initial ones), scale the LR down."""
        self._kls = []  # the reloaded policy starts a new window
        import torch
        self.rollbacks += 1
        trainer = self.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)
        good = [p for p in self.run.complete_checkpoints() if checkpoint_step(p) < (step or 0)]
        source = "the initial weights"
        if good and hasattr(trainer, "load_weights_from"):  # a trainer with weights of its own (PPO's value head)
            trainer.load_weights_from(good[-1])
            source = good[-1].name
        elif good:
            from rlft.models.weights import load_weights_into

            load_weights_into(model, good[-1])
            source = good[-1].name
        elif self._initial_state is not None:
            with torch.no_grad():
                model.load_state_dict(self._initial_state, strict=False)
        factor = self.cfg.monitor.rollback_lr_factor
        scale_learning_rate(trainer.optimizer, trainer.lr_scheduler, factor)
        if hasattr(trainer.optimizer, "state"):
            trainer.optimizer.state.clear()  # momentum from the bad steps would push straight back
        if not write:
            return
        self.console.message(f"health: rolled back to {source}, learning rate x{factor} "
                             f"(rollback {self.rollbacks}/{self.cfg.monitor.max_rollbacks})", "yellow")
        with open(self.run.health, "a") as fh:
            fh.write(json.dumps({"step": step, "rule": "rollback", "level": "info", "action": "rollback",
                                 "source": source, "lr_factor": factor, "rollbacks": self.rollbacks}) + "\n")
