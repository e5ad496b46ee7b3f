"""The `reward_model` built-in: scores (prompt, completion) with a trained reward model, a sequence classifier with
one output (an `rlft train --stage rm` run's final/, or any AutoModelForSequenceClassification folder or hub id).

```yaml
rewards:
  - fn: reward_model
    timeout_s: 300                 # the first call loads the model
    kwargs: {path: runs/rm/final, batch_size: 16, device: null, normalize: none, mean: 0.0, std: 1.0}
```

Each text is rendered as the RM was trained: through the RM's own tokenizer and chat template (prompt as the user
turn, completion as the assistant's) unless its final/rlft_reward_model.json says it trained on plain text (then
prompt + completion + eos, as TRL's RewardTrainer joins them). Scored in batches, under no_grad, on `device`
(default: the device the policy trains on in this process: cuda:LOCAL_RANK, else mps, else cpu). The model loads
once per process and path (every reward entry, stage evaluation and `rlft rewards try` naming it shares it).
`normalize`: `none` (raw scores), `fixed` ((score - mean) / std), `running` (by the mean and standard deviation of
every score this process has seen so far, this batch included).

Importing this module does not import torch; `check_kwargs` (what validate-config runs) reads config.json only.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

from rlft import run_files
from rlft.numeric import is_finite
from rlft import world

NORMALIZE = ("none", "running", "fixed")
SCORING_FILE = run_files.REWARD_MODEL_SCORING  # written beside the weights by the rm stage (rlft.trainers.reward)
KWARGS = ("path", "batch_size", "device", "normalize", "mean", "std")

_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str], "_Scorer"] = {}


def _looks_hub_id(path: str) -> bool:
    """`org/name`: not a local-looking path (same rule as model.name_or_path)."""
    return path.count("/") == 1 and not path.startswith((".", "/", "~")) and not Path(path.split("/")[0]).is_dir()


def check_kwargs(kwargs: dict, pending: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """[(kwargs key, problem)] for a `reward_model` entry, without importing torch: the folder exists and holds a
    sequence classifier's config.json (a hub id is checked when the run loads it); `pending`: folders an earlier
    pipeline stage writes, not there yet."""
    problems: list[tuple[str, str]] = []
    for key in kwargs:
        if key not in KWARGS:
            problems.append((key, f"unknown reward_model option; allowed: {', '.join(KWARGS)}"))
    path = kwargs.get("path")
    if not isinstance(path, str) or not path.strip():
        problems.append(("path", "reward_model needs kwargs.path: a reward model folder (an rm run's final/) or a "
                                 "hub id"))
    elif str(Path(path)) not in {str(Path(p)) for p in pending}:
        folder = Path(path).expanduser()
        if folder.is_dir():
            problems += [("path", p) for p in _folder_problems(folder)]
        elif not _looks_hub_id(path):
            problems.append(("path", f"reward model folder not found: {path} (train one with "
                                     f"`rlft train --stage rm`, then name its final/)"))
    bs = kwargs.get("batch_size", 16)
    if not (isinstance(bs, int) and not isinstance(bs, bool) and bs >= 1):
        problems.append(("batch_size", f"must be a whole number >= 1, got {bs!r}"))
    device = kwargs.get("device")
    if device is not None and not (isinstance(device, str) and device.split(":")[0] in ("cpu", "cuda", "mps")):
        problems.append(("device", f"must be cpu, cuda, cuda:N, mps or null (the policy's device), got {device!r}"))
    normalize = kwargs.get("normalize", "none")
    if normalize not in NORMALIZE:
        problems.append(("normalize", f"must be one of {', '.join(NORMALIZE)}, got {normalize!r}"))
    for key in ("mean", "std"):
        if key in kwargs and not is_finite(kwargs[key]):
            problems.append((key, f"must be a number, got {kwargs[key]!r}"))
    if normalize == "fixed" and is_finite(kwargs.get("std", 1.0)) and not kwargs.get("std", 1.0) > 0:
        problems.append(("std", f"must be above 0 with normalize: fixed, got {kwargs.get('std')!r}"))
    return problems


def _folder_problems(folder: Path) -> list[str]:
    config = folder / "config.json"
    if not config.is_file():
        extra = " (it holds a PEFT adapter: name the rm run's final/, which is merged)" \
            if (folder / "adapter_config.json").is_file() else ""
        return [f"{folder} has no config.json, so it is no model folder{extra}"]
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        return [f"{config} is not readable JSON: {exc}"]
    archs = data.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in archs):
        shown = ", ".join(map(str, archs)) or "none"
        return [f"{folder} is not a sequence-classification model (architectures: {shown}); a reward model is an rm "
                f"run's final/ or another AutoModelForSequenceClassification"]
    if data.get("num_labels", len(data.get("id2label") or {0: 0})) != 1:
        return [f"{folder} has {len(data.get('id2label') or {})} outputs; a reward model has one score"]
    return []


def default_device() -> str:
    """The device this process's policy trains on: cuda:LOCAL_RANK, else mps, else cpu."""
    import torch

    if torch.cuda.is_available():
        return f"cuda:{world.local_rank()}"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


class _Scorer:
    """One loaded reward model, its tokenizer, how it renders texts, and the running score statistics."""

    def __init__(self, path: str, device: str):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(path).to(device).eval()
        self.model.requires_grad_(False)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:  # the classifier finds each row's last token by it
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.tokenizer.padding_side = "right"
        note = Path(path) / SCORING_FILE
        scoring = json.loads(note.read_text()) if note.is_file() else {}
        self.chat = scoring.get("chat", bool(getattr(self.tokenizer, "chat_template", None)))
        self.max_length = scoring.get("max_length")
        self.device = device
        self.count, self.mean, self.m2 = 0, 0.0, 0.0  # running statistics (Welford)
        self.lock = threading.Lock()

    def text(self, prompt: Any, completion: Any) -> str:
        from rlft.rewards.builtin import completion_text

        answer = completion_text(completion)
        if self.chat:
            messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
            return self.tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": answer}],
                                                      tokenize=False)
        head = prompt if isinstance(prompt, str) else "".join(m.get("content", "") for m in prompt)
        return head + answer + (self.tokenizer.eos_token or "")

    def score(self, prompts: list, completions: list, batch_size: int) -> list[float]:
        import torch

        texts = [self.text(p, c) for p, c in zip(prompts, completions)]
        scores: list[float] = []
        with self.lock, torch.no_grad():
            for i in range(0, len(texts), batch_size):
                enc = self.tokenizer(texts[i:i + batch_size], return_tensors="pt", padding=True,
                                     add_special_tokens=False, truncation=self.max_length is not None,
                                     max_length=self.max_length)
                enc = {k: v.to(self.device) for k, v in enc.items()}
                scores += self.model(**enc).logits[:, 0].float().cpu().tolist()
        return scores

    def running(self, scores: list[float]) -> list[float]:
        with self.lock:
            for s in scores:
                self.count += 1
                delta = s - self.mean
                self.mean += delta / self.count
                self.m2 += delta * (s - self.mean)
            std = math.sqrt(self.m2 / self.count) if self.count > 1 else 1.0
            mean = self.mean
        return [(s - mean) / (std if std > 1e-8 else 1.0) for s in scores]


def load(path: str, device: str | None = None) -> _Scorer:
    """The reward model at `path` on `device`, loaded once per process."""
    device = device or default_device()
    key = (str(Path(path).expanduser().resolve()) if Path(path).expanduser().is_dir() else path, device)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = _Scorer(str(Path(path).expanduser()) if Path(path).expanduser().is_dir() else path, device)
        return _LOADED[key]


def reward_model(prompts: list[Any], completions: list[Any], path: str | None = None, batch_size: int = 16,
                 device: str | None = None, normalize: str = "none", mean: float = 0.0, std: float = 1.0,
                 **_columns: Any) -> list[float]:
    """The reward model's score of each (prompt, completion), normalised as `normalize` says."""
    if not path:
        raise ValueError("reward_model: kwargs.path is required (a reward model folder or hub id)")
    if normalize not in NORMALIZE:
        raise ValueError(f"reward_model: normalize must be one of {', '.join(NORMALIZE)}, got {normalize!r}")
    scorer = load(path, device)
    scores = scorer.score(list(prompts), list(completions), int(batch_size))
    if normalize == "fixed":
        return [(s - float(mean)) / float(std) for s in scores]
    if normalize == "running":
        return scorer.running(scores)
    return scores
