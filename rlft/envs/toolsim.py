"""`toolsim`: the staged guide's tool-use simulator (section 4) as a built-in environment.

A deterministic tool world: each task (generated from the dataset row's task id and the seed) asks for a
sequence of tool calls ending with `finish`. Every step is scored with the guide's reward table, one
component per rule (all values are env kwargs):

    step_penalty (-0.5, every step)        schema_pass (+2) / schema_fail (-5): a well-formed call or not
    correct_tool (+5): the next tool the task needs     wrong_tool (-3): any other known or unknown tool
    redundant_action (-2): the same call as the step before (instead of wrong_tool)
    style_pass (+1): the action is the call and nothing else
    task_complete (+10): the last required call made     task_failed (-5): a wrong final answer, or the
    last allowed turn (env.max_episode_length) spent without finishing
    guardrail_violation (-10): a forbidden tool or argument; the episode ends

A call that fails its schema is not executed (no correct/wrong tool component).

Variants:
* `tiny`: one-letter tools for the built-in tiny model: l (lookup), c (convert), w (write), f (finish),
  x (delete: forbidden). An action whose first non-space character is a lowercase letter calls that
  tool (schema_pass; tiny tools take no arguments), anything else is not a call (schema_fail);
  style_pass when the action is only that letter (repeats allowed: the tiny tokenizer has runs like
  "ff"). Prompt: "Call l then f."
* `chat`: JSON tool calls `{"name": ..., "arguments": {...}}` (optionally inside <tool_call> tags) with
  the tool schemas in `tools` (passed to the chat template). Tasks: look up a value, optionally convert
  it and write a record, then finish with the answer. Forbidden: the `delete_records` tool and any
  argument mentioning a secret.

Pure python, no torch.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from rlft.envs.registry import register_env

__all__ = ["REWARD_TABLE", "ToolSim"]

#: The guide's reward table (reward units); every entry is also a ToolSim kwarg.
REWARD_TABLE = {
    "task_complete": 10.0, "task_failed": -5.0, "correct_tool": 5.0, "wrong_tool": -3.0, "schema_pass": 2.0,
    "schema_fail": -5.0, "style_pass": 1.0, "guardrail_violation": -10.0, "step_penalty": -0.5,
    "redundant_action": -2.0,
}

_KEYS = ["apple", "river", "stone", "cloud", "maple", "tiger", "ocean", "amber"]
_UNITS = {"km": ("mi", 0.621371), "kg": ("lb", 2.20462), "m": ("ft", 3.28084)}

CHAT_TOOLS = [
    {"type": "function", "function": {"name": "lookup", "description": "Look up the value stored under a key.",
     "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}},
    {"type": "function", "function": {"name": "convert", "description": "Convert a value to another unit.",
     "parameters": {"type": "object", "properties": {"value": {"type": "number"}, "to_unit": {"type": "string"}},
                    "required": ["value", "to_unit"]}}},
    {"type": "function", "function": {"name": "write_record", "description": "Store a named record.",
     "parameters": {"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "number"}},
                    "required": ["name", "value"]}}},
    {"type": "function", "function": {"name": "finish", "description": "End the task with the final answer.",
     "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}},
    {"type": "function", "function": {"name": "delete_records", "description": "Delete every stored record.",
     "parameters": {"type": "object", "properties": {}, "required": []}}},
]
_ARG_TYPES = {"string": str, "number": (int, float)}


@register_env("toolsim")
class ToolSim:
    def __init__(self, variant: str = "tiny", steps: int = 2, forbidden_tools: list[str] | None = None,
                 **rewards: float):
        if variant not in ("tiny", "chat"):
            raise ValueError(f"toolsim variant must be 'tiny' or 'chat', got {variant!r}")
        unknown = set(rewards) - set(REWARD_TABLE)
        if unknown:
            raise ValueError(f"unknown toolsim kwargs {sorted(unknown)}; reward kwargs: {', '.join(REWARD_TABLE)}")
        if not 1 <= int(steps) <= 4:
            raise ValueError(f"toolsim steps must be 1-4 (calls per task, finish included), got {steps}")
        self.variant, self.steps = variant, int(steps)
        self.r = {**REWARD_TABLE, **{k: float(v) for k, v in rewards.items()}}
        self.forbidden = set(forbidden_tools if forbidden_tools is not None
                             else (["x"] if variant == "tiny" else ["delete_records"]))
        self.tools = CHAT_TOOLS if variant == "chat" else None
        self.max_episode_length = 20  # the episode loop sets the run's env.max_episode_length

    # --- tasks ------------------------------------------------------------------------------
    def reset(self, row: dict, seed: int) -> list[dict]:
        task_id = row.get("task_id", row.get("prompt_id", 0))
        rng = random.Random(f"{seed}:{task_id}")
        self.turn, self.done_calls, self.last_call = 0, 0, None
        if self.variant == "tiny":
            self.plan = [(rng.choice("lcw"), None) for _ in range(self.steps - 1)] + [("f", None)]
            return [{"role": "user", "content": "Call " + " then ".join(t for t, _ in self.plan) + "."}]
        key = rng.choice(_KEYS)
        value = rng.randint(2, 99)
        self.table = {k: rng.randint(2, 99) for k in _KEYS}
        self.table[key] = value
        plan: list[tuple[str, dict | None]] = [("lookup", {"key": key})]
        answer: Any = value
        text = f"Look up `{key}`"
        if self.steps >= 3:
            unit, (to_unit, factor) = rng.choice(sorted(_UNITS.items()))
            answer = round(value * factor, 2)
            plan.append(("convert", {"to_unit": to_unit}))
            text += f" (a value in {unit}), convert it to {to_unit}"
        if self.steps >= 4:
            name = f"rec{rng.randint(1, 9)}"
            plan.append(("write_record", {"name": name}))
            text += f", store it as record `{name}`"
        plan.append(("finish", {"answer": str(answer)}))
        self.plan = plan[-self.steps:] if self.steps == 1 else plan
        text = (text + " and finish with the result." if self.steps > 1
                else f"Finish with the answer {answer}.")
        return [{"role": "system", "content": "You call tools with JSON: {\"name\": ..., \"arguments\": {...}}."},
                {"role": "user", "content": text}]

    # --- parsing ----------------------------------------------------------------------------
    def _parse(self, text: str) -> tuple[str | None, dict, bool, bool]:
        """(tool or None when no call is recognisable, args, schema ok, clean style)."""
        s = text.strip()
        if self.variant == "tiny":
            if not s or not s[0].isalpha() or not s[0].islower():
                return None, {}, False, False
            tool = s[0]
            return tool, {}, True, set(s) <= {tool}
        body = re.sub(r"^<tool_call>\s*|\s*</tool_call>$", "", s)
        try:
            call = json.loads(body)
        except ValueError:
            m = re.search(r"\{.*\}", s, re.S)
            try:
                call = json.loads(m.group(0)) if m else None
            except ValueError:
                call = None
            clean = False
        else:
            clean = True
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None, {}, False, False
        args = call.get("arguments", {})
        if not isinstance(args, dict):
            return call["name"], {}, False, clean
        spec = next((t["function"] for t in CHAT_TOOLS if t["function"]["name"] == call["name"]), None)
        ok = spec is not None and all(k in args for k in spec["parameters"]["required"]) and all(
            k in spec["parameters"]["properties"]
            and isinstance(v, _ARG_TYPES[spec["parameters"]["properties"][k]["type"]]) and not isinstance(v, bool)
            for k, v in args.items())
        return call["name"], args, ok, clean

    def _known(self, tool: str) -> bool:
        return tool in "lcwfx" if self.variant == "tiny" else any(t["function"]["name"] == tool for t in CHAT_TOOLS)

    def _result(self, tool: str, args: dict) -> str:
        if self.variant == "tiny":
            return f"ok {tool}"
        if tool == "lookup":
            return json.dumps({"value": self.table.get(args["key"])})
        if tool == "convert":
            factor = next((f for u, f in _UNITS.values() if u == args["to_unit"]), None)
            return json.dumps({"value": round(args["value"] * factor, 2) if factor else None})
        return json.dumps({"ok": True})

    # --- one step ---------------------------------------------------------------------------
    def step(self, action_text: str):
        r, comps = self.r, {"step_penalty": self.r["step_penalty"]}
        self.turn += 1
        tool, args, schema_ok, clean = self._parse(action_text)
        info = {"tool_call": tool is not None, "success": False}
        done = False
        secret = any("secret" in str(v).lower() or "password" in str(v).lower() for v in args.values())
        if tool is not None and (tool in self.forbidden or secret):
            comps["guardrail_violation"] = r["guardrail_violation"]
            return "blocked: forbidden action", comps, True, {**info, "guardrail": True}
        if tool is None or (self._known(tool) and not schema_ok):
            comps["schema_fail"] = r["schema_fail"]
            obs = "error: not a valid tool call"
        elif not self._known(tool):
            comps["wrong_tool"] = r["wrong_tool"]
            obs = f"error: unknown tool {tool}"
        else:
            comps["schema_pass"] = r["schema_pass"]
            if clean:
                comps["style_pass"] = r["style_pass"]
            want, want_args = self.plan[self.done_calls]
            call = (tool, json.dumps(args, sort_keys=True))
            matches = tool == want and all(str(args.get(k)) == str(v) for k, v in (want_args or {}).items()
                                           if k != "answer")
            if matches and tool in ("f", "finish") and want_args is not None \
                    and str(args.get("answer", "")).strip() != want_args["answer"]:
                comps["task_failed"] = r["task_failed"]
                return "wrong answer", comps, True, info
            if matches:
                comps["correct_tool"] = r["correct_tool"]
                self.done_calls += 1
                obs = self._result(tool, args)
                if self.done_calls == len(self.plan):
                    comps["task_complete"] = r["task_complete"]
                    done = True
                    info["success"] = True
            elif call == self.last_call:
                comps["redundant_action"] = r["redundant_action"]
                obs = "error: repeated the previous call"
            else:
                comps["wrong_tool"] = r["wrong_tool"]
                obs = f"error: {tool} is not the next step"
            self.last_call = call
        if not done and self.turn >= self.max_episode_length:
            comps["task_failed"] = r["task_failed"]
            done = True
        return obs, comps, done, info
