"""The length limits of the preference stages (DPO, ORPO) in one place. Config knowledge, standard library only:
`validate-config` checks and derives with it, `show-config --explain` states it, and the preference eval
(rlft.stages.common.preference_eval) samples with it.

- The effective max_length (prompt + answer) is `<stage>.max_length` capped by `train.max_seq_length`.
- `<stage>.max_prompt_length` must leave room for an answer inside it. Set by the user, a value at or above the
  effective max_length is an error. Left to rlft's profiles (the stage profile's 2048 tokens beside the cpu
  profile's max_seq_length of 512), it becomes half the effective max_length, with a warning: the shipped
  combination stays runnable and says what it uses.
- The eval's answer budget is `eval.max_new_tokens` (the budget every stage's eval shares), else
  `<stage>.eval_max_new_tokens`, or, when both are null, the longest chosen answer of the
  preference data the eval prompts come from (as training tokenizes it), at most the effective max_length.
  It never comes from max_length - max_prompt_length, which can leave a single token.
"""

from __future__ import annotations

from typing import Any, Callable

ANSWER_ROWS = 1000       # preference pairs whose chosen answers are measured for the eval's budget, at most
DEFAULT_EVAL_TOKENS = 128  # the eval's budget when the chosen answers cannot be measured


def effective_max_length(max_length: int, max_seq_length: int) -> int:
    """Longest prompt + answer: the stage's max_length, capped by the hardware's train.max_seq_length."""
    return min(max_length, max_seq_length)


def check_prompt_length(c: Any, section: str, get: Callable[[str], Any], problems: list) -> None:
    """`<section>.max_prompt_length` against the effective max_length of the composed config `c` (a Composed; `get`
    reads a dotted key, the schema default when unset). Set by the user: an error naming both limits. From the
    profiles or the default: half the effective max_length instead, recorded as a layer `--explain` shows, and a
    warning naming the contradiction."""
    from rlft.config.compose import Layer
    from rlft.config.errors import Problem

    key, ml_key = f"{section}.max_prompt_length", f"{section}.max_length"
    mp, ml, msl = get(key), get(ml_key), get("train.max_seq_length")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (mp, ml, msl)):
        return  # a wrong type is reported by the schema check
    limit = effective_max_length(ml, msl)
    if mp < limit:
        return
    where = c.layer_of(key)
    if msl < ml:
        how = (f"{ml_key} {ml} ({c.layer_of(ml_key)}) capped by train.max_seq_length {msl} "
               f"({c.layer_of('train.max_seq_length')})")
        raise_ = "train.max_seq_length"
    else:
        how, raise_ = f"{ml_key} {ml} ({c.layer_of(ml_key)})", ml_key
    if c.set_by_user(key):
        problems.append(Problem(key, where, f"{mp} tokens of prompt leave no room for an answer: the effective "
                                            f"max_length is {limit} tokens ({how}); set {key} below {limit} (e.g. "
                                            f"{max(1, limit // 2)}) or raise {raise_}"))
        return
    derived = max(1, limit // 2)
    data = c.data.get(section)
    if data is None:
        data = c.data[section] = {}
    elif not isinstance(data, dict):
        return  # `orpo: 5`: reported as a section that is no mapping
    data["max_prompt_length"] = derived
    c.layers.append(Layer(f"derived: half the effective max_length {limit}, as {mp} from {where} does not fit",
                          {section: {"max_prompt_length": derived}}, profile=True))
    problems.append(Problem(key, where, f"{mp} tokens do not fit in the effective max_length of {limit} tokens "
                                        f"({how}); the run uses {derived} (half of it), so answers keep room. Set "
                                        f"{key} below {limit} to choose", "warning"))


def eval_budget(cfg: Any, longest_answer: int | None, measured: str) -> tuple[int, str]:
    """(new tokens, why in words) of the preference eval's samples: `eval.max_new_tokens`, else
    `<stage>.eval_max_new_tokens`, else `longest_answer` (the longest chosen answer in tokens, `measured` says of
    what) capped by the effective max_length; DEFAULT_EVAL_TOKENS when it could not be measured (None)."""
    s = cfg.stage
    sec = getattr(cfg, s)
    if cfg.eval.max_new_tokens is not None:
        return cfg.eval.max_new_tokens, "eval.max_new_tokens"
    if sec.eval_max_new_tokens is not None:
        return sec.eval_max_new_tokens, f"{s}.eval_max_new_tokens"
    limit = effective_max_length(sec.max_length, cfg.train.max_seq_length)
    if longest_answer is None:
        n = min(DEFAULT_EVAL_TOKENS, limit)
        cap = f", capped by max_length {limit}" if n < DEFAULT_EVAL_TOKENS else ""
        return n, f"the default {DEFAULT_EVAL_TOKENS}{cap} ({measured}); {s}.eval_max_new_tokens sets it"
    n = max(1, min(longest_answer, limit))
    cap = f", capped by max_length {limit}" if n < longest_answer else ""
    return n, f"the longest chosen answer{cap}: {longest_answer} tokens ({measured}); {s}.eval_max_new_tokens sets it"


def explain(cfg: Any) -> list[str]:
    """`show-config --explain` lines of a preference stage: the lengths training uses and the eval's answer budget."""
    s = cfg.stage
    sec = getattr(cfg, s)
    msl = cfg.train.max_seq_length
    limit = effective_max_length(sec.max_length, msl)
    capped = f", capped by train.max_seq_length {msl}" if msl < sec.max_length else ""
    lines = [f"# lengths: prompt + answer at most {limit} tokens ({s}.max_length {sec.max_length}{capped}); prompts "
             f"keep their last {sec.max_prompt_length} tokens ({s}.max_prompt_length), so an answer keeps at least "
             f"{max(0, limit - sec.max_prompt_length)} tokens in training"]
    source = "data.eval" if cfg.data.eval else "data.train"
    if cfg.eval.max_new_tokens is not None:
        budget = f"answers of up to {cfg.eval.max_new_tokens} new tokens (eval.max_new_tokens)"
    elif sec.eval_max_new_tokens is not None:
        budget = f"answers of up to {sec.eval_max_new_tokens} new tokens ({s}.eval_max_new_tokens)"
    else:
        budget = (f"answers of up to the longest chosen answer of the first {ANSWER_ROWS} pairs of {source} in tokens, "
                  f"as training tokenizes it (measured when the tokenizer loads), at most {limit} "
                  f"({s}.eval_max_new_tokens null)")
    if cfg.rewards and cfg.data.eval_prompts:
        lines.append(f"# eval: samples on the first {cfg.data.eval_prompts} prompts of {source} at the start and the "
                     f"end, {budget}")
    else:
        lines.append(f"# eval: no fresh samples (they need `rewards:` and data.eval_prompts); with them, {budget}")
    return lines
