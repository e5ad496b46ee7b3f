"""Read a run folder into plain Python data for the report: metrics, completions, health events,
reward logs and the summary. Only the files are read (no trainer state, no torch), so a report
can be built on any machine that has the folder, while training runs or long after."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

# completion-row keys that are not extra prompt columns
COMPLETION_KEYS = {"step", "group", "prompt", "prompt_id", "completion", "rewards", "total", "advantage", "weight",
                   "reward_version", "round", "kept", "length", "completion_length", "completion_tokens",
                   "prompt_length", "prompt_tokens", "text", "messages", "turns", "time", "rank", "index", "sample"}
# per-completion numbers shown as their own columns when a stage writes them
PER_COMPLETION = ("advantage", "weight", "kept", "round", "reward_version")
MAX_TEXT_CHARS = 4000  # per completion in the report; the jsonl keeps the full text


class ReportInputError(Exception):
    """A path given to `rlft report` is not a run folder (the message names it and why)."""


@dataclass
class Prompt:
    key: object          # prompt_id, or the prompt text when rows carry no id
    index: int
    text: str = ""
    extra: dict = field(default_factory=dict)
    steps: list = field(default_factory=list)  # distinct steps, in order of appearance
    count: int = 0
    length: int | None = None                  # tokens (or characters, see Completions.length_unit)
    step_set: set = field(default_factory=set, repr=False)


@dataclass
class Completions:
    reward_names: list
    prompts: list              # [Prompt]
    prompt: list               # per completion: index into prompts
    step: list
    text: list
    scores: list               # per reward name: list of float|None, one per completion
    total: list
    length: list               # tokens (or characters, see length_unit), None where unknown
    length_unit: str
    per_completion: dict       # name -> list, for PER_COMPLETION keys a stage wrote
    truncated: int = 0         # completions whose text was cut to MAX_TEXT_CHARS

    def __len__(self) -> int:
        return len(self.step)


@dataclass
class RunData:
    path: Path
    name: str
    stage: str
    metrics: list              # training rows (dicts), by step
    eval_metrics: list         # rows with eval_* keys
    health: list
    reward_logs: list
    summary: dict
    completions: Completions | None
    samples_only: bool = False  # completions came from samples.jsonl (RS-SFT/AWR sampling phase)


def _num(x):
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, (int, float)) and math.isfinite(x):
        return float(x)
    return None


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a jsonl file; a torn last line (a run still writing) and blank lines are skipped."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _stage(path: Path, summary: dict, metrics: list) -> str:
    if summary.get("stage"):
        return str(summary["stage"])
    for row in metrics:
        if row.get("stage"):
            return str(row["stage"])
    cfg = path / "config.yaml"
    if cfg.is_file():
        for line in cfg.read_text(errors="replace").splitlines():
            if line.startswith("stage:"):
                return line.split(":", 1)[1].split("#", 1)[0].strip().strip("'\"")
    return "unknown"


def _completion_text(row: dict) -> str:
    for key in ("completion", "text"):
        if isinstance(row.get(key), str):
            return row[key]
    for key in ("messages", "turns"):  # episodes: the transcript
        if key in row:
            value = row[key]
            if isinstance(value, list):
                return "\n".join(f"[{m.get('role', '?')}] {m.get('content', '')}" if isinstance(m, dict) else str(m)
                                 for m in value)
            return json.dumps(value)
    return ""


def _length(row: dict):
    for key in ("completion_tokens", "completion_length", "length"):
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
    return None


def _scalar(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # the page's JSON has no NaN
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def load_completions(rows: list[dict], max_chars: int = MAX_TEXT_CHARS) -> Completions:
    prompts: dict = {}
    reward_names: list = []
    seen_names: set = set()
    for row in rows:
        for name in (row.get("rewards") or {}):
            if name not in seen_names:
                seen_names.add(name)
                reward_names.append(name)
    c = Completions(reward_names=reward_names, prompts=[], prompt=[], step=[], text=[],
                    scores=[[] for _ in reward_names], total=[], length=[], length_unit="tokens",
                    per_completion={k: [] for k in PER_COMPLETION if any(k in r for r in rows)})
    last_step_of = {}
    for row in rows:
        text = row.get("prompt")
        text = text if isinstance(text, str) else ("" if text is None else json.dumps(text, ensure_ascii=False))
        key = row.get("prompt_id", text)
        key = key if isinstance(key, (str, int, float)) else json.dumps(key)
        p = prompts.get(key)
        if p is None:
            p = prompts[key] = Prompt(key=key, index=len(c.prompts))
            c.prompts.append(p)
        if text and not p.text:  # the rendered prompt may be written once per prompt id
            p.text = text
        if p.length is None:
            p.length = next((int(row[k]) for k in ("prompt_tokens", "prompt_length")
                             if isinstance(row.get(k), (int, float)) and not isinstance(row.get(k), bool)), None)
        for k, v in row.items():
            if k not in COMPLETION_KEYS and k not in p.extra:
                p.extra[k] = _scalar(v)
        step = row.get("step")
        step = int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else 0
        if last_step_of.get(key) != step:
            if step not in p.step_set:
                p.step_set.add(step)
                p.steps.append(step)
            last_step_of[key] = step
        p.count += 1
        c.prompt.append(p.index)
        c.step.append(step)
        body = _completion_text(row)
        if len(body) > max_chars:
            body = body[:max_chars] + f" … [{len(body) - max_chars} more characters in completions.jsonl]"
            c.truncated += 1
        c.text.append(body)
        rewards = row.get("rewards") or {}
        for i, name in enumerate(reward_names):
            c.scores[i].append(_num(rewards.get(name)))
        c.total.append(_num(row.get("total")))
        c.length.append(_length(row))
        for k, values in c.per_completion.items():
            v = row.get(k)
            values.append(v if isinstance(v, (bool, str)) else _num(v))
    if all(isinstance(p.key, int) and not isinstance(p.key, bool) for p in c.prompts):
        order = sorted(c.prompts, key=lambda p: p.key)  # the dataset's order, not the sampling order
        remap = {p.index: new for new, p in enumerate(order)}
        for new, p in enumerate(order):
            p.index = new
        c.prompts = order
        c.prompt = [remap[i] for i in c.prompt]
    return c


def fill_lengths(c: Completions, tokenizer_json: Path | None) -> None:
    """Token lengths for prompts and completions whose rows carry none: the run's own tokenizer
    (the `tokenizers` library reads tokenizer.json without torch), else character counts."""
    missing = [i for i, n in enumerate(c.length) if n is None]
    missing_p = [p for p in c.prompts if p.length is None]
    if not missing and not missing_p:
        return
    if tokenizer_json is not None:
        try:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(tokenizer_json))
            encoded = tok.encode_batch([c.text[i] for i in missing], add_special_tokens=False)
            for i, enc in zip(missing, encoded):
                c.length[i] = len(enc.ids)
            for p, enc in zip(missing_p, tok.encode_batch([p.text for p in missing_p], add_special_tokens=False)):
                p.length = len(enc.ids)
            if missing:  # decoded text re-encoded: close to, not always equal to, the sampled count
                c.length_unit = "tokens (text re-tokenized)"
            return
        except Exception:  # noqa: BLE001 - an unreadable tokenizer only costs the token counts
            pass
    if missing:
        c.length_unit = "characters" if len(missing) == len(c.length) else "tokens (characters where unknown)"
    for i in missing:
        c.length[i] = len(c.text[i])
    for p in missing_p:
        p.length = len(p.text)


def find_tokenizer(path: Path) -> Path | None:
    candidates = [path / "final" / "tokenizer.json"]
    ckpts = sorted((path / "checkpoints").glob("checkpoint-*/tokenizer.json")) if (path / "checkpoints").is_dir() else []
    candidates += ckpts[::-1]
    return next((p for p in candidates if p.is_file()), None)


def load_run(path: Path | str, name: str | None = None, max_chars: int = MAX_TEXT_CHARS) -> RunData:
    path = Path(path)
    if not path.exists():
        raise ReportInputError(f"{path}: no such run folder")
    if path.is_file() and path.suffix == ".jsonl":  # completion rows alone, e.g. what `rlft rewards try` wrote
        completions = load_completions(read_jsonl(path), max_chars)
        fill_lengths(completions, None)
        return RunData(path=path, name=name or path.name, stage="unknown", metrics=[], eval_metrics=[], health=[],
                       reward_logs=[], summary={}, completions=completions)
    if not path.is_dir():
        raise ReportInputError(f"{path}: not a folder (give the run folder, e.g. runs/grpo-20250101-120000, or a "
                               f"jsonl of completion rows)")
    files = {n: path / n for n in ("metrics.jsonl", "completions.jsonl", "samples.jsonl", "health.jsonl",
                                   "reward_logs.jsonl", "summary.json")}
    if not any(files[n].is_file() for n in ("metrics.jsonl", "completions.jsonl", "samples.jsonl", "summary.json")):
        raise ReportInputError(f"{path}: not an rlft run folder (no metrics.jsonl, completions.jsonl or summary.json)")
    summary = {}
    if files["summary.json"].is_file():
        try:
            summary = json.loads(files["summary.json"].read_text())
        except json.JSONDecodeError:
            summary = {}
    rows = read_jsonl(files["metrics.jsonl"]) if files["metrics.jsonl"].is_file() else []
    train_rows, eval_rows = [], []
    for row in rows:
        (eval_rows if any(k.startswith("eval_") for k in row) else train_rows).append(row)
    stage = _stage(path, summary, rows)
    completions, samples_only = None, False
    source = files["completions.jsonl"]
    if not source.is_file() and files["samples.jsonl"].is_file():
        source, samples_only = files["samples.jsonl"], True
    if source.is_file():
        completions = load_completions(read_jsonl(source), max_chars)
        fill_lengths(completions, find_tokenizer(path))
    return RunData(path=path, name=name or path.resolve().name, stage=stage, metrics=train_rows,
                   eval_metrics=eval_rows,
                   health=read_jsonl(files["health.jsonl"]) if files["health.jsonl"].is_file() else [],
                   reward_logs=read_jsonl(files["reward_logs.jsonl"]) if files["reward_logs.jsonl"].is_file() else [],
                   summary=summary, completions=completions, samples_only=samples_only)


def unique_names(paths: list[Path]) -> list[str]:
    """Run labels for overlaid graphs: the folder name, with its parent added where two collide."""
    names = [Path(p).resolve().name for p in paths]
    out = []
    for p, n in zip(paths, names):
        out.append(f"{Path(p).resolve().parent.name}/{n}" if names.count(n) > 1 else n)
    return out
