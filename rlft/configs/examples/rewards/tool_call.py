"""Example reward for the tool-use pipeline: 1.0 when the completion's JSON calls the row's expected tool."""

import json
import re

def right_tool(prompts, completions, tool, **kwargs):
    scores = []
    for completion, expected in zip(completions, tool):
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        match = re.search(r"\{.*\}", text, re.S)
        try:
            called = json.loads(match.group(0)).get("tool") if match else None
        except (json.JSONDecodeError, AttributeError):
            called = None
        scores.append(1.0 if called == expected else 0.0)
    return scores


right_tool.required_columns = ["tool"]  # rlft checks the data has it before the run starts
