"""The episode loop: token layout, loss mask, step rewards on the right tokens, caps and faults."""

from __future__ import annotations

import time

import pytest
import torch

from rlft.envs.safe import SafeEnv
from rlft.rollout import SamplingParams
from rlft.rollout.episodes import Episode, collate_episodes, episode_metrics, run_episodes


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlft.tiny import ensure_tiny_model

    path = ensure_tiny_model()
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


class TwoTurns:
    """Scripted: observation "seen N", reward {"a": N, "b": 0.5} at step N, done after two steps."""

    def reset(self, row, seed):
        self.n = 0
        return [{"role": "user", "content": f"Task {row['task_id']}."}]

    def step(self, action):
        self.n += 1
        return f"seen {self.n}", {"a": float(self.n), "b": 0.5}, self.n == 2, {"success": self.n == 2}


def test_two_turn_episode_mask_and_rewards_against_a_hand_built_sequence(tiny):
    model, tok = tiny
    params = SamplingParams(temperature=1.0, max_new_tokens=3)
    torch.manual_seed(0)
    (ep,) = run_episodes(model, tok, [SafeEnv(TwoTurns(), "TwoTurns")], [{"task_id": 7}], [0], params,
                         max_turns=5, max_seq_length=512)
    assert ep.success and ep.length == 2 and not ep.truncated and not ep.failed
    # hand-built: the two action token runs are where the mask is 1
    first = ep.action_mask.index(0)
    a1 = ep.ids[:first]
    bridge_len = ep.action_mask[first:].index(1)
    a2 = ep.ids[first + bridge_len:]
    bridge = ep.ids[first:first + bridge_len]
    assert tok.decode(bridge) == "<|im_end|>\n<|im_start|>tool\nseen 1<|im_end|>\n<|im_start|>assistant\n"
    assert ep.action_mask == [1] * len(a1) + [0] * bridge_len + [1] * len(a2)
    assert 1 <= len(a1) <= 3 and 1 <= len(a2) <= 3
    expected_prompt = "<|im_start|>user\nTask 7.<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(ep.prompt_ids) == expected_prompt
    assert ep.turns[0]["action"] == tok.decode(a1, skip_special_tokens=True)
    # the sampler's log-probs sit on action tokens only
    assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.action_mask) if not m)
    assert all(lp < 0.0 for lp, m in zip(ep.logprobs, ep.action_mask) if m)
    b = collate_episodes([ep], tok.pad_token_id)
    rewards = b.rewards_BT[0]
    assert rewards[len(a1) - 1] == 1.5 and rewards[len(ep.ids) - 1] == 2.5
    assert float(rewards.abs().sum()) == 4.0  # nowhere else
    assert b.action_mask_BT[0].tolist()[:len(ep.ids)] == ep.action_mask
    assert ep.return_ == 4.0 and ep.components() == {"a": 3.0, "b": 1.0}


def test_collate_pads_and_places_rewards():
    e1 = Episode(prompt_id=0, seed=0, prompt_ids=[5, 6, 7], ids=[10, 11, 20, 21, 12], action_mask=[1, 1, 0, 0, 1],
                 logprobs=[-1.0, -2.0, 0.0, 0.0, -3.0], reward_at=[1, 4],
                 turns=[{"reward": 2.0, "components": {}}, {"reward": -1.0, "components": {}}])
    e2 = Episode(prompt_id=1, seed=0, prompt_ids=[8], ids=[13], action_mask=[1], logprobs=[-0.5], reward_at=[0],
                 turns=[{"reward": 3.0, "components": {}}])
    b = collate_episodes([e1, e2], pad_id=1)
    assert b.prompt_ids_BP.tolist() == [[5, 6, 7], [1, 1, 8]]
    assert b.prompt_mask_BP.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert b.completion_ids_BT.tolist() == [[10, 11, 20, 21, 12], [13, 1, 1, 1, 1]]
    assert b.attention_mask_BT.tolist() == [[1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert b.action_mask_BT.tolist() == [[1, 1, 0, 0, 1], [1, 0, 0, 0, 0]]
    assert b.rewards_BT.tolist() == [[0, 2.0, 0, 0, -1.0], [3.0, 0, 0, 0, 0]]


class Endless:
    def reset(self, row, seed):
        return "go"

    def step(self, action):
        if getattr(self, "mode", None) == "raise":
            raise ValueError("broken")
        if getattr(self, "mode", None) == "sleep":
            time.sleep(1.0)
        return "more", -1.0, False, {}


def test_turn_cap_context_budget_and_faults(tiny):
    model, tok = tiny
    params = SamplingParams(max_new_tokens=2)
    envs = [Endless() for _ in range(4)]
    envs[1].mode, envs[2].mode = "raise", "sleep"
    safe = [SafeEnv(e, "Endless", timeout_s=0.2, failure_reward=-5.0) for e in envs]
    eps = run_episodes(model, tok, safe[:3], [{}] * 3, [0] * 3, params, max_turns=3, max_seq_length=512)
    assert [ep.length for ep in eps] == [3, 1, 1]
    assert [ep.failed for ep in eps] == [False, True, True] and eps[0].return_ == -3.0
    assert eps[1].turns[0]["components"] == {"env_failure": -5.0} and eps[2].turns[0]["fault"].startswith("timeout")
    (short,) = run_episodes(model, tok, safe[3:], [{}], [0], params, max_turns=50, max_seq_length=40)
    assert short.truncated and len(short.prompt_ids) + len(short.ids) <= 40
    m = episode_metrics(eps + [short])
    assert m["episodes_failed"] == 2 and m["episodes_truncated"] == 1
    assert m["rewards/env_failure/mean"] == pytest.approx(-2.5)


def test_gae_across_a_two_turn_episode_by_hand():
    from rlft.algos import gae

    # actions a1 a2 | observation o1 o2 | action a3; turn rewards 2.0 (on a2) and -1.0 (on a3)
    ep = Episode(prompt_id=0, seed=0, prompt_ids=[5], ids=[10, 11, 20, 21, 12], action_mask=[1, 1, 0, 0, 1],
                 logprobs=[-1.0] * 5, reward_at=[1, 4],
                 turns=[{"reward": 2.0, "components": {}}, {"reward": -1.0, "components": {}}])
    b = collate_episodes([ep], pad_id=1)
    values = torch.tensor([[0.5, 1.0, 9.0, 9.0, 0.4]])  # observation values are skipped
    adv, ret = gae(b.rewards_BT, values * b.action_mask_BT, b.action_mask_BT, gamma=0.9, lam=0.8)
    # t=4: d=-1-0.4=-1.4, A=-1.4; t=1: d=2+0.9*0.4-1=1.36, A=1.36+0.72*(-1.4)=0.352;
    # t=0: d=0.9*1.0-0.5=0.4, A=0.4+0.72*0.352=0.65344
    assert adv.tolist()[0] == pytest.approx([0.65344, 0.352, 0.0, 0.0, -1.4])
    assert ret.tolist()[0] == pytest.approx([1.15344, 1.352, 0.0, 0.0, -1.0])


def test_chat_toolsim_episode_renders_with_tools(tiny):
    from rlft.envs.toolsim import ToolSim

    model, tok = tiny
    env = ToolSim(variant="chat", steps=2)
    (ep,) = run_episodes(model, tok, [SafeEnv(env, "toolsim")], [{"task_id": 1}], [3], SamplingParams(max_new_tokens=4),
                         max_turns=2, max_seq_length=2048)
    assert ep.length == 2 and ep.messages[1]["content"].startswith("Look up")
    # the tiny template drops tools= (as SmolLM2's does): the schemas reach the model in the system message
    opening = tok.decode(ep.prompt_ids)
    assert "Tools you can call" in opening and '"name":"finish"' in opening
    assert ep.turns[-1]["components"]["task_failed"] == -5.0  # random text: no valid call in two turns
    assert ep.turns[0]["observation"] == [{"role": "tool", "content": "error: not a valid tool call"}]


def test_tools_go_to_the_template_when_it_renders_them():
    from transformers import AutoTokenizer

    from rlft.rollout.episodes import _template, template_renders_tools, tools_in_system_message
    from rlft.tiny import ensure_tiny_model

    tools = [{"type": "function", "function": {"name": "finish", "parameters": {}}}]
    tok = AutoTokenizer.from_pretrained(ensure_tiny_model())
    tok.chat_template = ("{% if tools %}TOOLS:{{ tools | length }}\n{% endif %}"
                         "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
    msgs = [{"role": "user", "content": "Finish."}]
    assert template_renders_tools(tok, tools)
    assert _template(tok, msgs, tools, False, False) == "TOOLS:1\nuser: Finish.\n"  # the template's own rendering
    # a conversation without a system message gets one holding the schemas; one with a system message keeps it first
    assert tools_in_system_message(msgs, tools)[0]["role"] == "system"
    with_system = tools_in_system_message([{"role": "system", "content": "Be brief."}, *msgs], tools)
    assert with_system[0]["content"].startswith("Be brief.\n\nTools you can call") and with_system[1:] == msgs
