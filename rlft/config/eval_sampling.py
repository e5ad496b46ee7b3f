"""How a stage samples its evaluation, in one place: the `eval:` section over the stage's own defaults.

Every sampling stage (GRPO, PPO, RS-SFT, AWR, and DPO/ORPO with `rewards:`) asks `eval_sampling(cfg, defaults)`
for its evaluation's settings, so that a pipeline which sets `eval:` once (in its `defaults:`) has every stage
sample the same way, and the pipeline table can compare their numbers. A key left null keeps the stage's own
default, so a single run's eval is what it always was. Standard library only: `validate-config`, the pipeline
table and the report read it without torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

EVAL_SEED_OFFSET = 7919  # evaluation draws from its own seed (train.seed + this), the same at the start and the end
NOT_IDENTITY = ("batch_size",)  # changes which random draws a prompt gets (as a seed does), not what is measured


@dataclass(frozen=True)
class EvalSettings:
    """What one stage's evaluation samples: per prompt `n` completions of at most `max_new_tokens` new tokens at
    `temperature` / `top_p` (or greedy), prompts through the chat template per `chat_template`, seeded
    train.seed + `seed_offset`; a prompt passes when one of its samples' total reward reaches `pass_threshold`."""
    n: int
    max_new_tokens: int
    temperature: float
    top_p: float = 1.0
    greedy: bool = False
    chat_template: str = "auto"
    seed_offset: int = EVAL_SEED_OFFSET
    pass_threshold: float = 1.0
    batch_size: int | None = None  # completions per generate call (eval.batch_size); None = the stage's own

    def as_dict(self) -> dict:
        """The settings as summary.json's `eval.<part>.sampling` holds them."""
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """In words, for the pipeline table: `4 samples of ≤64 tokens at T=1.0`."""
        return describe(self.as_dict())


def describe(sampling: dict) -> str:
    """`sampling` (an EvalSettings as a dict, from summary.json) in words: `4 samples of ≤64 tokens at T=1.0`."""
    n = sampling.get("n")
    what = f"{n} sample{'' if n == 1 else 's'} of ≤{sampling.get('max_new_tokens')} tokens"
    if sampling.get("greedy"):
        how = "greedy"
    else:
        how = f"at T={sampling.get('temperature')}"
        if sampling.get("top_p") not in (None, 1, 1.0):
            how += f", top_p={sampling.get('top_p')}"
    rest = [f"chat template {sampling.get('chat_template')}"] if sampling.get("chat_template") != "auto" else []
    if sampling.get("seed_offset") != EVAL_SEED_OFFSET:
        rest.append(f"seed offset {sampling.get('seed_offset')}")
    return ", ".join([f"{what} {how}", *rest])


def sampling_difference(a: dict, b: dict) -> list[str]:
    """The keys in which two stages' eval sampling settings differ (pass_threshold included), in schema order."""
    keys = [f.name for f in dataclasses.fields(EvalSettings) if f.name not in NOT_IDENTITY]
    return [k for k in keys if a.get(k) != b.get(k)]


def eval_sampling(cfg: Any, defaults: EvalSettings) -> EvalSettings:
    """The stage's eval settings: each `eval.*` key that is set, else the stage's `defaults`. Greedy decoding draws
    one completion per prompt (n samples would all be the same): `eval.samples_per_prompt` above 1 with
    `eval.greedy` is refused by validate-config, and greedy with it null takes n = 1."""
    e = cfg.eval
    n = e.samples_per_prompt if e.samples_per_prompt is not None else defaults.n
    return dataclasses.replace(
        defaults,
        n=1 if e.greedy else n,
        greedy=bool(e.greedy),
        max_new_tokens=e.max_new_tokens if e.max_new_tokens is not None else defaults.max_new_tokens,
        temperature=e.temperature if e.temperature is not None else defaults.temperature,
        top_p=e.top_p if e.top_p is not None else defaults.top_p,
        chat_template=cfg.data.chat_template,
        pass_threshold=e.pass_threshold,
        batch_size=e.batch_size if e.batch_size is not None else defaults.batch_size,
    )


SAMPLES_FIX = "set eval.samples_per_prompt to 1 or null, or eval.greedy to false"


def greedy_samples_problem(n: Any, greedy: Any, fix: str = SAMPLES_FIX) -> str | None:
    """Why `n` samples per prompt cannot go with `greedy`, or None: greedy draws one sample. Shared by
    validate-config (`eval.samples_per_prompt`) and `rlft eval -n` (`fix`: what to change instead)."""
    if greedy is True and isinstance(n, int) and not isinstance(n, bool) and n > 1:
        return (f"{n} samples per prompt with eval.greedy: greedy decoding draws the same completion every time; "
                f"{fix}")
    return None


def check_eval(c: Any) -> None:
    """Cross-field rule of the `eval:` section (`c`: a stage spec's check context): greedy draws one sample."""
    msg = greedy_samples_problem(c.get("eval.samples_per_prompt"), c.get("eval.greedy"))
    if msg:
        c.error("eval.samples_per_prompt", msg)
