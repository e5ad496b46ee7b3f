"""Read a run folder into plain Python data for the report: metrics, completions, health events,
reward logs and the summary. Only the files are read (no trainer state, no torch), so a report
can be built on any machine that has the folder, while training runs or long after."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from rlft.numeric import is_finite, is_number
from rlft import run_files

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
    problems: list = field(default_factory=list)  # what was skipped as malformed, one phrase per file


def _num(x):
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, (int, float)) and math.isfinite(x):
        return float(x)
    return None


# kinds of value a field of a run file may hold (null always may: "not measured")
KINDS = {
    "number": is_number,                                        # NaN / Infinity too: shown as "none"
    "finite": is_finite,                                        # steps, times: used as positions and in the page's JSON
    "count": lambda v: is_finite(v) and v >= 0,
    "text": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),
    "id": lambda v: isinstance(v, str) or is_finite(v),
    "flag or number": lambda v: isinstance(v, bool) or is_finite(v),
    "text or number": lambda v: isinstance(v, str) or is_finite(v),
}
COUNTS = {k: "count" for k in ("completion_tokens", "completion_length", "length", "prompt_tokens", "prompt_length")}
# the fields the report reads from each jsonl file and the kind each must be; a row with another kind in
# one of them (or a row that is not a JSON object) is skipped and counted, never guessed at
ROW_FIELDS = {
    "completions": {"step": "finite", "round": "finite", "prompt_id": "id", "completion": "text", "text": "text",
                    "rewards": "object", "total": "number", "advantage": "number", "weight": "number",
                    "kept": "flag or number", "reward_version": "text or number", **COUNTS},
    "health": {"step": "finite", "rule": "text", "level": "text", "metric": "text", "action": "text", "message": "text",
               "source": "text", "value": "number", "threshold": "number"},
    "reward_logs": {"step": "finite", "reward": "text", "calls": "count", "ms": "finite", "errors": "count",
                    "output": "text", "error": "text"},
}
SUMMARY_FIELDS = {"stage": "text", "status": "text", "steps": "finite", "wall_s": "finite", "max_steps": "finite",
                  "headline": "object", "reward": "object", "best_checkpoint": "object", "eval": "object"}


def _fits(row: dict, fields: dict) -> bool:
    return all(row.get(k) is None or KINDS[kind](row[k]) for k, kind in fields.items())


def metrics_row_ok(row) -> bool:
    """A metrics.jsonl row: an object with a numeric step whose values are numbers, true/false or null
    (`stage` is the one text field rlft writes)."""
    return (isinstance(row, dict) and is_finite(row.get("step"))
            and all(v is None or isinstance(v, bool) or is_number(v) or (k == "stage" and isinstance(v, str))
                    for k, v in row.items()))


def completion_row_ok(row) -> bool:
    """A completions.jsonl / samples.jsonl row: its known fields of the right kind, every reward score a number."""
    return (isinstance(row, dict) and _fits(row, ROW_FIELDS["completions"])
            and all(v is None or is_number(v) for v in (row.get("rewards") or {}).values()))


def health_row_ok(row) -> bool:
    return isinstance(row, dict) and _fits(row, ROW_FIELDS["health"])


def reward_log_row_ok(row) -> bool:
    return isinstance(row, dict) and _fits(row, ROW_FIELDS["reward_logs"])


def read_jsonl(path: Path, ok=lambda row: isinstance(row, dict)) -> tuple[list[dict], int]:
    """(rows for which `ok` holds, count of the other lines). A torn last line (a run still writing) and
    blank lines are skipped without counting; any other line that is not JSON counts as malformed."""
    rows, bad = [], 0
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:  # JSONDecodeError, or a number too large for Python's int
            bad += i < len(lines) - 1 or line.endswith("\n")
            continue
        if ok(row):
            rows.append(row)
        else:
            bad += 1
    return rows, bad


def load_summary(path: Path) -> tuple[dict, list[str]]:
    """summary.json as a dict with its known fields of the right kind, and what was ignored (in words)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError:
        return {}, [f"{run_files.SUMMARY} is not valid JSON: ignored"]
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a string", type(None): "null"}.get(type(data), "a number or true/false")
        return {}, [f"{run_files.SUMMARY} is {kind}, not an object: ignored"]
    wrong = [k for k, kind in SUMMARY_FIELDS.items() if data.get(k) is not None and not KINDS[kind](data[k])]
    data = {k: v for k, v in data.items() if k not in wrong}
    ev = data.get("eval") or {}
    wrong += [f"eval.{k}" for k in ("start", "end") if ev.get(k) is not None and not isinstance(ev[k], dict)]
    if "eval" in data:
        data["eval"] = {k: v for k, v in ev.items() if f"eval.{k}" not in wrong}
    return data, ([f"{run_files.SUMMARY}: {len(wrong)} field(s) of the wrong kind ignored "
                   f"({', '.join(wrong)})"] if wrong else [])


def _stage(path: Path, summary: dict, metrics: list) -> str:
    if summary.get("stage"):
        return str(summary["stage"])
    for row in metrics:
        if row.get("stage"):
            return str(row["stage"])
    cfg = path / run_files.CONFIG
    try:
        text = cfg.read_text(errors="replace") if cfg.is_file() else ""
    except OSError:
        text = ""  # the stage only labels the page
    for line in text.splitlines():
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
    candidates = [path / run_files.FINAL / "tokenizer.json"]
    ckpt_dir = path / run_files.CHECKPOINTS
    ckpts = sorted(ckpt_dir.glob(f"{run_files.CHECKPOINT_GLOB}/tokenizer.json")) if ckpt_dir.is_dir() else []
    candidates += ckpts[::-1]
    return next((p for p in candidates if p.is_file()), None)


def chain_problems(path: Path) -> list[str]:
    """A warning when the run started from an earlier run (`model.init_from`) that is gone or was replaced since (its
    config.yaml's hash is not the one this run recorded): the report still shows what the run logged, but its
    weights can no longer be rebuilt as trained."""
    from rlft.config.init_from import ChainError, chain_of

    if not (path / run_files.CONFIG).is_file():
        return []
    try:
        chain_of(path)
    except ChainError as exc:
        return [f"warning: model.init_from: {exc}"]
    return []


def load_run(path: Path | str, name: str | None = None, max_chars: int = MAX_TEXT_CHARS) -> RunData:
    path = Path(path)
    if not path.exists():
        raise ReportInputError(f"{path}: no such run folder")
    if path.is_file() and path.suffix == ".jsonl":  # completion rows alone, e.g. what `rlft rewards try` wrote
        rows, bad = read_jsonl(path, completion_row_ok)
        completions = load_completions(rows, max_chars)
        fill_lengths(completions, None)
        return RunData(path=path, name=name or path.name, stage="unknown", metrics=[], eval_metrics=[], health=[],
                       reward_logs=[], summary={}, completions=completions,
                       problems=[f"skipped {bad} malformed row(s) of {path.name}"] if bad else [])
    if not path.is_dir():
        raise ReportInputError(f"{path}: not a folder (give the run folder, e.g. runs/grpo-20250101-120000, or a "
                               f"jsonl of completion rows)")
    f = run_files
    files = {n: path / n for n in (f.METRICS, f.COMPLETIONS, f.SAMPLES, f.HEALTH, f.REWARD_LOGS, f.SUMMARY,
                                   f.EVAL_COMPLETIONS)}
    if not any(files[n].is_file() for n in (f.METRICS, f.COMPLETIONS, f.SAMPLES, f.SUMMARY)):
        raise ReportInputError(f"{path}: not an rlft run folder (no metrics.jsonl, completions.jsonl or summary.json)")
    problems: list = []
    summary = {}
    if files[f.SUMMARY].is_file():
        summary, problems = load_summary(files[f.SUMMARY])
    problems += chain_problems(path)

    def rows_of(name: str, ok) -> list:
        if not files[name].is_file():
            return []
        rows, bad = read_jsonl(files[name], ok)
        if bad:
            problems.append(f"skipped {bad} malformed row(s) of {name}")
        return rows

    rows = rows_of(f.METRICS, metrics_row_ok)
    train_rows, eval_rows = [], []
    for row in rows:
        (eval_rows if any(k.startswith("eval_") for k in row) else train_rows).append(row)
    stage = _stage(path, summary, rows)
    completions, samples_only = None, False
    source = f.COMPLETIONS
    if not files[source].is_file() and files[f.SAMPLES].is_file():
        source, samples_only = f.SAMPLES, True
    evals = rows_of(f.EVAL_COMPLETIONS, completion_row_ok)  # the fixed evaluation prompts, every evaluation
    if files[source].is_file() or evals:
        rows = rows_of(source, completion_row_ok) if files[source].is_file() else []
        completions = load_completions(rows + evals, max_chars)
        fill_lengths(completions, find_tokenizer(path))
    return RunData(path=path, name=name or path.resolve().name, stage=stage, metrics=train_rows,
                   eval_metrics=eval_rows, health=rows_of(f.HEALTH, health_row_ok),
                   reward_logs=rows_of(f.REWARD_LOGS, reward_log_row_ok),
                   summary=summary, completions=completions, samples_only=samples_only, problems=problems)


def unique_names(paths: list[Path]) -> list[str]:
    """Run labels for overlaid graphs: the folder name, with its parent added where two collide."""
    names = [Path(p).resolve().name for p in paths]
    out = []
    for p, n in zip(paths, names):
        out.append(f"{Path(p).resolve().parent.name}/{n}" if names.count(n) > 1 else n)
    return out
