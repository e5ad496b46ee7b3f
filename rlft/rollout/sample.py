"""Sampling completions from the current policy: the first step of every stage that samples.

`sample` is one batched `model.generate` per chunk of prompts (KV cache, left padding, n completions
per prompt through `num_return_sequences`), plus the per-token log-probs of the sampled tokens. The
log-probs are taken inside generation by a logits processor that keeps one step's log-softmax at a
time, instead of `output_scores=True`, which would hold (batch x vocab) floats for every generated
token (gigabytes for a real vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from rlft.models.sharded import whole_weights
from rlft.data.messages import as_text

__all__ = ["Rollouts", "SamplingParams", "completion_mask", "render_prompt", "sample"]


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0     # softmax temperature of the sampler (and of the recorded log-probs)
    top_p: float = 1.0           # nucleus threshold (1.0 = off)
    max_new_tokens: int = 256    # longest completion, in tokens
    batch_size: int | None = None  # completions per generate call (rounded down to whole prompts); None = all at once
    seed: int | None = None      # seeds the draws (in a forked RNG: the caller's random stream is left as it was)
    greedy: bool = False         # the most likely token each step (evaluation); temperature and top_p unused


@dataclass
class Rollouts:
    """n completions for each of P prompts; rows are prompt-major (row b belongs to prompt b // n)."""
    prompts: list[Any]              # P prompts as given (text or chat messages)
    prompt_texts: list[str]         # P prompts as plain text (what reward functions and completion logs get)
    prompt_ids: list[Any]           # P caller ids (dataset row ids), default 0..P-1
    n: int                          # completions per prompt
    prompt_index: list[int]         # B = P*n: the prompt of each row (index into `prompts`)
    prompt_ids_BP: torch.Tensor     # prompt token ids, left-padded with the pad id
    prompt_mask_BP: torch.Tensor    # 1 on prompt tokens, 0 on padding
    completion_ids_BT: torch.Tensor  # sampled token ids, right-padded with the pad id
    completion_mask_BT: torch.Tensor  # 1 on sampled tokens up to and including the first EOS
    logprobs_BT: torch.Tensor       # sampler log-prob of each sampled token at `temperature` (0 where mask is 0)
    completions: list[str]          # B decoded completions (special tokens and everything after EOS dropped)
    finished: list[bool] = field(default_factory=list)  # B: ended with EOS (False = cut at max_new_tokens)
    max_new_tokens: int | None = None  # the token budget the completions were sampled under

    def __len__(self) -> int:
        return len(self.completions)

    @property
    def num_prompts(self) -> int:
        return len(self.prompts)

    def row_prompt_texts(self) -> list[str]:
        """The prompt text of every row (B)."""
        return [self.prompt_texts[i] for i in self.prompt_index]

    def row_prompt_ids(self) -> list[Any]:
        return [self.prompt_ids[i] for i in self.prompt_index]

    def model_inputs(self, device=None) -> dict:
        """Prompt + completion as one learner batch: `input_ids`, `attention_mask` (padding and tokens
        after EOS off), `position_ids` numbered as generate numbers them (from the first real token), and
        `prompt_len` P; the logits at positions P-1 ... P+T-2 predict the completion tokens."""
        ids = torch.cat([self.prompt_ids_BP, self.completion_ids_BT], dim=1)
        mask = torch.cat([self.prompt_mask_BP, self.completion_mask_BT], dim=1)
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        out = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
        if device is not None:
            out = {k: v.to(device) for k, v in out.items()}
        return {**out, "prompt_len": self.prompt_ids_BP.size(1)}


def render_prompt(tokenizer, prompt: Any) -> list[int]:
    """Token ids of one prompt as TRL's trainers build them: chat messages through the chat template
    with the generation prompt, plain text through the tokenizer; a list of ints is already token ids
    (the episode loop continues a conversation it has tokenised itself)."""
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        return list(prompt)
    if isinstance(prompt, list):
        out = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)
        return list(out["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


class _SampledLogprobs(LogitsProcessor):
    """Records log softmax(logits / T) of each sampled token. Generation calls processors before it
    samples, so step t's log-softmax is kept until step t+1 shows which token was drawn."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.pending: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self.steps.append(self.pending.gather(1, input_ids[:, -1:]).squeeze(1))
        self.pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) log-probs, given the tokens of the final step."""
        if self.pending is not None:
            self.steps.append(self.pending.gather(1, last_tokens.unsqueeze(1)).squeeze(1))
            self.pending = None
        return torch.stack(self.steps, dim=1)


def completion_mask(ids_BT: torch.Tensor, eos_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask_BT, finished_B): 1 on every token up to and including the first EOS, 0 after it (generate
    pads finished rows); finished = the row has an EOS."""
    if not eos_ids:
        return torch.ones_like(ids_BT), torch.zeros(ids_BT.size(0), dtype=torch.bool)
    is_eos = torch.isin(ids_BT, torch.tensor(list(eos_ids), dtype=ids_BT.dtype))
    before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # EOS tokens strictly before each position
    return (before == 0).long(), is_eos.any(dim=1)


def _left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids, mask


def _right_pad(t: torch.Tensor, width: int, value) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, width - t.size(1)), value=value) if t.size(1) < width else t


def _eos_ids(model, tokenizer) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return [e for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None]


@torch.no_grad()
def sample(model, tokenizer, prompts: Sequence[Any], n: int, params: SamplingParams,
           prompt_ids: Sequence[Any] | None = None, progress: Callable[[int, int], None] | None = None) -> Rollouts:
    """n sampled completions per prompt from `model` as it is now (a PEFT model samples with its adapter).
    `progress(done, total)`, when given, is called after each generate chunk with the completions drawn so far.

    The model is put in eval mode (no dropout) while sampling and returned to its previous mode. Pass the
    unwrapped model (not a DDP wrapper). With `params.seed` the same prompts and settings draw the same tokens.
    `progress(done, total)`, when given, is called after each generate call with the completions drawn so far.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("no prompts to sample from")
    if params.seed is None:
        return _sample(model, tokenizer, prompts, n, params, prompt_ids, progress)
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
        torch.manual_seed(params.seed)
        return _sample(model, tokenizer, prompts, n, params, prompt_ids, progress)


def _sample(model, tokenizer, prompts: list, n: int, params: SamplingParams, prompt_ids, progress=None) -> Rollouts:
    ids = list(range(len(prompts))) if prompt_ids is None else list(prompt_ids)
    if len(ids) != len(prompts):
        raise ValueError(f"{len(ids)} prompt ids for {len(prompts)} prompts")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = _eos_ids(model, tokenizer)
    tokenized = [render_prompt(tokenizer, p) for p in prompts]
    per_call = max(1, (params.batch_size or len(prompts) * n) // n)  # whole prompts per generate call
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    chunks = []
    try:
        with whole_weights(model):  # a sharded policy: gathered once for the whole call
            for start in range(0, len(prompts), per_call):
                p_ids, p_mask = _left_pad(tokenized[start:start + per_call], pad_id)
                recorder = _SampledLogprobs(params.temperature)
                draw = {"do_sample": False} if params.greedy else \
                    {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
                out = model.generate(
                    input_ids=p_ids.to(device), attention_mask=p_mask.to(device), **draw,
                    max_new_tokens=params.max_new_tokens,
                    num_return_sequences=n, use_cache=True, pad_token_id=pad_id, eos_token_id=eos,
                    logits_processor=LogitsProcessorList([recorder]),
                )
                completion = out[:, p_ids.size(1):]
                logprobs = recorder.finish(completion[:, -1]) if completion.size(1) else completion.float()
                chunks.append((p_ids.repeat_interleave(n, 0), p_mask.repeat_interleave(n, 0), completion.cpu(),
                               logprobs.cpu()))
                if progress is not None:
                    progress(min(start + per_call, len(prompts)) * n, len(prompts) * n)
    finally:
        model.train(was_training)
    P = max(c[0].size(1) for c in chunks)
    T = max(c[2].size(1) for c in chunks)
    prompt_ids_BP = torch.cat([torch.nn.functional.pad(c[0], (P - c[0].size(1), 0), value=pad_id) for c in chunks])
    prompt_mask_BP = torch.cat([torch.nn.functional.pad(c[1], (P - c[1].size(1), 0), value=0) for c in chunks])
    completion_ids_BT = torch.cat([_right_pad(c[2], T, pad_id) for c in chunks])
    logprobs_BT = torch.cat([_right_pad(c[3], T, 0.0) for c in chunks])
    completion_mask_BT, finished_B = completion_mask(completion_ids_BT, eos)
    logprobs_BT = logprobs_BT * completion_mask_BT
    finished = finished_B.tolist()
    texts = [tokenizer.decode(row[mask.bool()], skip_special_tokens=True)
             for row, mask in zip(completion_ids_BT, completion_mask_BT)]
    return Rollouts(
        prompts=prompts, prompt_texts=[as_text(p) for p in prompts], prompt_ids=ids, n=n,
        prompt_index=[i for i in range(len(prompts)) for _ in range(n)],
        prompt_ids_BP=prompt_ids_BP, prompt_mask_BP=prompt_mask_BP, completion_ids_BT=completion_ids_BT,
        completion_mask_BT=completion_mask_BT, logprobs_BT=logprobs_BT, completions=texts, finished=finished,
        max_new_tokens=params.max_new_tokens,
    )
