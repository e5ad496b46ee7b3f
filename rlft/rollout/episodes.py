"""Multi-turn episodes: the policy acts, the environment answers, until it is done.

One episode is one token sequence: the opening prompt (the env's `reset` messages through the chat
template, with `tools=` when the env has tools, or the tool schemas in the system message when the template
does not render `tools=`), then per turn the sampled action tokens followed by
the *bridge*: the template text that closes the assistant turn and renders the observation messages
and the next generation prompt. The bridge is found by rendering the conversation with a placeholder
as the action and taking the text after it, so any chat template works without being prefix-stable,
and the action tokens stay exactly what the sampler drew (no re-tokenisation drift, as verl/SkyRL).

    action_mask_BT   1 on action tokens (the loss and GAE run over these), 0 on observations/padding
    rewards_BT       each step's env reward on the last token of that turn's action
    attention_mask   1 on every real token (actions and observations)

An episode ends when the env says done, after `max_turns` actions, when the next turn would pass
`max_seq_length` tokens (`truncated`), or on an env fault (exception, timeout, bad return: the step
reward is the env's failure_reward and the episode counts as `failed`).
"""

from __future__ import annotations

import json
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from rlft.envs.safe import SafeEnv
from rlft.rollout.sample import SamplingParams, sample

__all__ = ["Episode", "EpisodeBatch", "bridge_tokens", "collate_episodes", "episode_metrics", "run_episodes",
           "truncated_turns"]

_PLACEHOLDER = "\u2063RLFT_ACTION\u2063"


@dataclass
class Episode:
    prompt_id: Any
    seed: int
    messages: list[dict] = field(default_factory=list)   # the whole conversation, as text
    prompt_ids: list[int] = field(default_factory=list)  # the opening prompt's tokens
    ids: list[int] = field(default_factory=list)         # everything after the prompt: actions + bridges
    action_mask: list[int] = field(default_factory=list)  # per entry of `ids`
    logprobs: list[float] = field(default_factory=list)   # sampler log-prob per entry of `ids` (0 off actions)
    reward_at: list[int] = field(default_factory=list)    # per turn: index in `ids` of its last action token
    turns: list[dict] = field(default_factory=list)       # per turn: action, observation, reward, components, ...
    done: bool = False
    success: bool = False
    truncated: bool = False   # ended by the context budget (train.max_seq_length)
    failed: bool = False      # ended by an env fault

    @property
    def return_(self) -> float:
        return float(sum(t["reward"] for t in self.turns))

    @property
    def length(self) -> int:
        return len(self.turns)

    @property
    def cut_at_max_tokens(self) -> bool:
        """Some turn's action ran into the token budget (max_tokens) without ending (no EOS)."""
        return any(t.get("hit_max_tokens", False) for t in self.turns)

    @property
    def tool_calls(self) -> int:
        return sum(1 for t in self.turns if t.get("tool_call", True))

    def components(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for t in self.turns:
            for k, v in t["components"].items():
                out[k] = out.get(k, 0.0) + v
        return out

    def log_row(self) -> dict:
        """The episode as completions.jsonl shows it."""
        return {"prompt_id": self.prompt_id, "seed": self.seed, "prompt": self.messages[:self._opening],
                "turns": [{"action": t["action"], "observation": t["observation"], "reward": round(t["reward"], 6),
                           "components": {k: round(v, 6) for k, v in t["components"].items()},
                           **({"fault": t["fault"]} if t.get("fault") else {})} for t in self.turns],
                "return": round(self.return_, 6), "length": self.length, "success": self.success,
                "truncated": self.truncated, "failed": self.failed}

    _opening: int = 0


_RENDERS_TOOLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tokenizer -> its template shows tools=


def template_renders_tools(tokenizer, tools) -> bool:
    """Whether the tokenizer's chat template shows `tools=` at all: many drop them without a word (SmolLM2's)."""
    if tokenizer not in _RENDERS_TOOLS:
        probe = [{"role": "user", "content": "x"}]
        try:
            shown = (tokenizer.apply_chat_template(probe, tools=tools, tokenize=False)
                     != tokenizer.apply_chat_template(probe, tokenize=False))
        except Exception:  # a template that fails on tools= cannot show them either
            shown = False
        _RENDERS_TOOLS[tokenizer] = shown
        if not shown:
            print("rlft: the chat template does not render tools=, so the env's tool schemas go into the system "
                  "message as JSON", file=sys.stderr)
    return _RENDERS_TOOLS[tokenizer]


def tools_in_system_message(messages: list[dict], tools: list[dict]) -> list[dict]:
    """The conversation with the tool schemas appended to its system message (one is added when it has none)."""
    schemas = (json.dumps(t, sort_keys=True, separators=(",", ":")) for t in tools)  # compact: fewer tokens
    block = "Tools you can call, as JSON schemas:\n" + "\n".join(schemas)
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": messages[0]["content"] + "\n\n" + block}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def _template(tokenizer, messages: list[dict], tools, generation_prompt: bool, tokenize: bool):
    if tools and not template_renders_tools(tokenizer, tools):
        messages, tools = tools_in_system_message(messages, tools), None  # the model must see its tools somewhere
    kwargs = {"tools": tools} if tools else {}
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=tokenize,
                                        **({"return_dict": True} if tokenize else {}), **kwargs)
    return list(out["input_ids"]) if tokenize else out


def bridge_tokens(tokenizer, history: list[dict], observation: list[dict], action_ids: list[int],
                  tools=None) -> list[int]:
    """Tokens between an action and the next one: the template's end of the assistant turn, the
    observation messages and the generation prompt. An end-of-turn token the policy already sampled
    (its EOS) is not repeated."""
    text = _template(tokenizer, history + [{"role": "assistant", "content": _PLACEHOLDER}] + observation, tools,
                     True, False)
    tail = text[text.rindex(_PLACEHOLDER) + len(_PLACEHOLDER):]
    if action_ids:
        last = tokenizer.convert_ids_to_tokens(action_ids[-1])
        if isinstance(last, str) and last in tokenizer.all_special_tokens and tail.startswith(last):
            tail = tail[len(last):]
    return list(tokenizer(tail, add_special_tokens=False)["input_ids"])


@torch.no_grad()
def run_episodes(model, tokenizer, envs: Sequence[SafeEnv], rows: Sequence[dict], seeds: Sequence[int],
                 params: SamplingParams, max_turns: int, max_seq_length: int,
                 prompt_ids: Sequence[Any] | None = None, sampler=None, progress=None) -> list[Episode]:
    """One episode per (env, row, seed), all advanced together one turn at a time (one batched
    generate per turn over the episodes still running). `sampler` (rlft.rollout.sampler, synced to `model`)
    draws the turns instead of generate on `model`; `progress(done, total)`, when given, hears the
    episodes ended after each turn."""
    eps = [Episode(prompt_id=(prompt_ids[i] if prompt_ids is not None else i), seed=int(seeds[i]))
           for i in range(len(rows))]
    tools = [getattr(e.env, "tools", None) for e in envs]
    for i, (env, row) in enumerate(zip(envs, rows)):
        try:
            env.env.max_episode_length = max_turns
        except Exception:  # noqa: BLE001 - an env with __slots__ simply does not get it
            pass
        msgs, fault = env.reset(dict(row), int(seeds[i]))
        ep = eps[i]
        if fault is not None:
            ep.done = ep.failed = True
            ep.prompt_ids = [tokenizer.eos_token_id]
            ep.turns.append({"action": "", "observation": [], "reward": env.failure_reward,
                             "components": {"env_failure": env.failure_reward}, "fault": f"reset {fault}",
                             "tool_call": False})
            continue
        ep.messages, ep._opening = list(msgs), len(msgs)
        ep.prompt_ids = _template(tokenizer, msgs, tools[i], True, True)
        if len(ep.prompt_ids) + params.max_new_tokens > max_seq_length:
            ep.done = ep.truncated = True
    for _ in range(max_turns):
        active = [i for i, ep in enumerate(eps) if not ep.done]
        if not active:
            break
        turn_prompts = [eps[i].prompt_ids + eps[i].ids for i in active]
        r = sample(model, tokenizer, turn_prompts, 1, params) if sampler is None else \
            sampler.sample(turn_prompts, params, 1)
        for j, i in enumerate(active):
            ep, env = eps[i], envs[i]
            m = r.completion_mask_BT[j].bool()
            action_ids = r.completion_ids_BT[j][m].tolist()
            ep.ids += action_ids
            ep.action_mask += [1] * len(action_ids)
            ep.logprobs += r.logprobs_BT[j][m].tolist()
            ep.reward_at.append(len(ep.ids) - 1)
            text = r.completions[j]
            step = env.step(text)
            ep.turns.append({"action": text, "observation": step.observation, "reward": step.reward,
                             "components": step.components, "fault": step.fault,
                             "tool_call": bool(step.info.get("tool_call", True)),
                             # the action ran into params.max_new_tokens without ending (no EOS)
                             "hit_max_tokens": not r.finished[j]})
            ep.messages.append({"role": "assistant", "content": text})
            if step.fault is not None:
                ep.done = ep.failed = True
                continue
            if step.done:
                ep.done, ep.success = True, bool(step.info.get("success", False))
                continue
            bridge = bridge_tokens(tokenizer, ep.messages, step.observation, action_ids, tools[i])
            ep.messages += step.observation
            if len(ep.prompt_ids) + len(ep.ids) + len(bridge) + params.max_new_tokens > max_seq_length:
                ep.done = ep.truncated = True  # the next turn would not fit
                continue
            ep.ids += bridge
            ep.action_mask += [0] * len(bridge)
            ep.logprobs += [0.0] * len(bridge)
        if progress is not None:
            progress(sum(ep.done for ep in eps), len(eps))
    for ep in eps:
        ep.done = True
    return eps


@dataclass
class EpisodeBatch:
    """B episodes laid out for one learner forward: left-padded prompts, right-padded continuations."""
    episodes: list[Episode]
    prompt_ids_BP: torch.Tensor
    prompt_mask_BP: torch.Tensor
    completion_ids_BT: torch.Tensor
    attention_mask_BT: torch.Tensor  # 1 on actions and observations
    action_mask_BT: torch.Tensor     # 1 on action tokens only
    rewards_BT: torch.Tensor         # step rewards on each turn's last action token
    logprobs_BT: torch.Tensor        # sampler log-probs (0 off actions)

    @property
    def returns_B(self) -> torch.Tensor:
        return torch.tensor([ep.return_ for ep in self.episodes])


def collate_episodes(episodes: Sequence[Episode], pad_id: int) -> EpisodeBatch:
    B = len(episodes)
    P = max(len(ep.prompt_ids) for ep in episodes)
    T = max(1, max(len(ep.ids) for ep in episodes))
    prompt_ids = torch.full((B, P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((B, P), dtype=torch.long)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    amask = torch.zeros((B, T), dtype=torch.float32)
    rewards = torch.zeros((B, T), dtype=torch.float32)
    logp = torch.zeros((B, T), dtype=torch.float32)
    for b, ep in enumerate(episodes):
        n = len(ep.prompt_ids)
        prompt_ids[b, P - n:] = torch.tensor(ep.prompt_ids, dtype=torch.long)
        prompt_mask[b, P - n:] = 1
        k = len(ep.ids)
        if k:
            ids[b, :k] = torch.tensor(ep.ids, dtype=torch.long)
            attn[b, :k] = 1
            amask[b, :k] = torch.tensor(ep.action_mask, dtype=torch.float32)
            logp[b, :k] = torch.tensor(ep.logprobs, dtype=torch.float32)
            for pos, turn in zip(ep.reward_at, ep.turns):  # a reset fault has no action: nothing to place
                rewards[b, pos] += turn["reward"]
    return EpisodeBatch(list(episodes), prompt_ids, prompt_mask, ids, attn, amask, rewards, logp)


def truncated_turns(episodes: Sequence[Episode]) -> float:
    """Share of the sampled turns whose action hit the token budget without ending (no EOS); turns that
    sampled nothing (a reset fault) are not counted. 0.0 when no turn was sampled."""
    cut = [t["hit_max_tokens"] for ep in episodes for t in ep.turns if "hit_max_tokens" in t]
    return sum(cut) / len(cut) if cut else 0.0


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Per-update episode statistics (metrics.jsonl): return mean/std, success rate, length, tool calls,
    the mean per episode of each reward component, truncated and failed counts."""
    n = max(1, len(episodes))
    rets = torch.tensor([ep.return_ for ep in episodes] or [0.0])
    out = {
        "episode_return": float(rets.mean()),
        "episode_return_std": float(rets.std()) if len(episodes) > 1 else 0.0,
        "success_rate": sum(ep.success for ep in episodes) / n,
        "episode_length": sum(ep.length for ep in episodes) / n,
        "tool_calls": sum(ep.tool_calls for ep in episodes) / n,
        "episodes_truncated": float(sum(ep.truncated for ep in episodes)),
        "episodes_failed": float(sum(ep.failed for ep in episodes)),
        "frac_truncated": truncated_turns(episodes),
    }
    names = sorted({k for ep in episodes for k in ep.components()})
    for name in names:
        out[f"rewards/{name}/mean"] = sum(ep.components().get(name, 0.0) for ep in episodes) / n
    return out
