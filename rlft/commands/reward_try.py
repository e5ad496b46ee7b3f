"""`rlft rewards try`: run the config's reward functions on completions without training, through the
suite training builds (`rlft.stages.common.prompt_data.reward_suite`: weights, kwargs, timeouts, columns) and
the scorer training calls (`rlft.rollout.score_texts`), one call per prompt's completions. The
completions come from a run's log (re-scored with the reward code as it is now, against the logged
scores), from a hand-written jsonl file, or fresh from the configured model (the only path that loads
torch). Statistics and the verdict are `rlft.rewards.trial`'s; the scored rows go to a jsonl in
completions.jsonl's format."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlft.config.schema import RlftConfig
from rlft import run_files

__all__ = ["TryError", "check_sources", "default_out", "run_config_file", "run_stage_name", "try_rewards"]


class TryError(Exception):
    """Bad input to `rlft rewards try` (exit 2); the message is one line naming the file or option."""


MAX_SAMPLE = 256       # --sample: completions per prompt (the sampling stages' num_samples_per_prompt allows 256)
MAX_PROMPTS = 4096     # --max-prompts


@dataclass
class Item:
    """One completion to score, and what its source logged about it."""
    step: int
    prompt_id: Any
    prompt: Any                       # text or chat messages, as the reward functions receive it (via as_text)
    completion: Any
    columns: dict = field(default_factory=dict)   # the data row's other columns (reward keyword arguments)
    group: Hashable = None                        # the prompt (and step) whose samples are compared for signal
    logged_rewards: dict | None = None
    logged_total: float | None = None
    logged: bool = False


def default_out(runs: Path, now: float | None = None) -> Path:
    """`runs/rewards-try-<YYYYmmdd-HHMMSS>/rewards_try.jsonl`, in a folder no earlier trial has (a second call
    within the same second gets `-2`, `-3`, ...); the folder itself is made when the rows are written."""
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    folder, k = runs / f"rewards-try-{stamp}", 1
    while folder.exists() or folder.is_symlink():
        k += 1
        folder = runs / f"rewards-try-{stamp}-{k}"
    return folder / "rewards_try.jsonl"


# -- inputs ------------------------------------------------------------------------------------------
def check_sources(from_run: Path | None, completions: Path | None, sample: int | None, out: Path,
                  force: bool, max_prompts: int | None = None) -> None:
    """Exactly one source that exists, and an output file that may be written; before any work."""
    given = [name for name, v in (("--from-run", from_run), ("--completions", completions), ("--sample", sample))
             if v is not None]
    if len(given) != 1:
        raise TryError("give one source of completions: --from-run RUN, --completions FILE or --sample N"
                       + (f" (got {' and '.join(given)})" if given else ""))
    check_counts(sample, max_prompts if sample is not None else None)
    if from_run is not None:
        if not from_run.is_dir():
            raise TryError(f"--from-run {from_run}: no such run folder")
        if not run_log(from_run).is_file():
            raise TryError(f"--from-run {from_run}: no completions.jsonl or samples.jsonl (a run of a stage that "
                           f"samples, with monitor.log_completions not 0)")
        if not (from_run / run_files.CONFIG).is_file():
            raise TryError(f"--from-run {from_run}: no config.yaml (not an rlft run folder)")
    if completions is not None and not completions.is_file():
        raise TryError(f"--completions {completions}: no such file")
    from rlft.rundir.markers import FolderRefused, check_output_file

    try:
        check_output_file(out, force=force, what="-o file")
    except FolderRefused as exc:
        raise TryError(str(exc)) from None


def check_counts(sample: int | None, max_prompts: int | None) -> None:
    """--sample and --max-prompts within their ranges, before anything is loaded (a model loaded for nothing, or
    room for 10**12 completions asked of it)."""
    for flag, value, most in (("--sample", sample, MAX_SAMPLE), ("--max-prompts", max_prompts, MAX_PROMPTS)):
        if value is not None and not 1 <= value <= most:
            raise TryError(f"{flag} {value} is out of range; expected an integer between 1 and {most}")


def run_log(run: Path) -> Path:
    """A run's completion rows: completions.jsonl, or samples.jsonl of RS-SFT/AWR."""
    return run / run_files.COMPLETIONS if (run / run_files.COMPLETIONS).is_file() else run / run_files.SAMPLES


def run_stage_name(run: Path) -> str:
    from rlft.config.stages import DEFAULT_STAGE
    from rlft.rundir.resume_keys import saved_config

    return (saved_config(run) or {}).get("stage") or DEFAULT_STAGE


def run_config_file(run: Path, stage: str) -> Path:
    """The run's config (model, data, rewards, ...) as a layer file beside it; the caller deletes it."""
    from rlft.posttrain.config_layer import eval_config_file
    from rlft.errors import RunError

    try:
        return eval_config_file(run, stage)
    except OSError as exc:
        raise TryError(f"--from-run {run}: cannot write its config layer there: {exc.strerror or exc}") from None
    except RunError as exc:  # a link planted where the layer goes
        raise TryError(f"--from-run {run}: {exc}") from None


def numbered_rows(path: Path, what: str) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line; a line that is not a JSON object is a TryError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TryError(f"{what} {path}: cannot read it ({exc})") from None
    rows, lines = [], text.splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines) and not text.endswith("\n"):  # a run still writing its last row
                continue
            raise TryError(f"{path}:{i}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(row, dict):
            raise TryError(f"{path}:{i}: expected a JSON object, got {type(row).__name__}")
        rows.append((i, row))
    if not rows:
        raise TryError(f"{what} {path} has no rows")
    return rows


def _text_or_messages(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(m, dict) for m in value))


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _score_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def row_problem(row: dict, step_key: str = "step") -> str | None:
    """What makes a logged (or hand-written) row unusable: a step or prompt id that is not one, a logged score that
    is not a number; None when it is fine. Said as `FILE:LINE: ...` by the caller."""
    step = row.get(step_key, 0)
    if not _is_int(step):
        return f"`{step_key}` is {_kind(step)}, not an integer"
    pid = row.get("prompt_id")
    if pid is not None and not (_is_int(pid) or isinstance(pid, str)):
        return f"`prompt_id` is {_kind(pid)}, not an integer or a string"
    rewards = row.get("rewards")
    if rewards is not None:
        if not isinstance(rewards, dict):
            return f"`rewards` is {_kind(rewards)}, not an object of scores"
        for name, score in rewards.items():
            if not _score_or_none(score):
                return f"`rewards.{name}` is {_kind(score)}, not a number or null"
    if not _score_or_none(row.get("total")):
        return f"`total` is {_kind(row['total'])}, not a number or null"
    return None


def _checked(path: Path, line: int, row: dict, step_key: str = "step") -> dict:
    problem = row_problem(row, step_key)
    if problem:
        raise TryError(f"{path}:{line}: {problem} (a damaged row: mend or remove it)")
    return row


def _logged(item: Item, row: dict) -> Item:
    if isinstance(row.get("rewards"), dict) and "total" in row:
        item.logged, item.logged_rewards, item.logged_total = True, row["rewards"], row["total"]
    return item


def items_from_run(run: Path, cfg: RlftConfig) -> list[Item]:
    """The run's logged completions, each with the columns of its data row (found by prompt_id in the
    run's data.train, loaded as training loaded it)."""
    from rlft.errors import RunError
    from rlft.stages.common.prompt_data import load_prompt_dataset

    path = run_log(run)
    rows = numbered_rows(path, "--from-run")
    try:
        ds = load_prompt_dataset(cfg)
    except RunError as exc:
        raise TryError(f"--from-run {run}: its data.train cannot be loaded: {exc}") from None
    where = {pid: i for i, pid in enumerate(ds["prompt_id"])}
    extra = [c for c in ds.column_names if c not in ("prompt", "prompt_id")]
    items = []
    for line, row in rows:
        if not _text_or_messages(row.get("completion")):
            raise TryError(f"{path}:{line}: no completion text (rows of episodes are scored by their environment)")
        _checked(path, line, row, "step" if "step" in row else "round")
        if "prompt" in row and not _text_or_messages(row["prompt"]):
            raise TryError(f"{path}:{line}: `prompt` is {_kind(row['prompt'])}, not text or chat messages "
                           f"(a damaged row: mend or remove it)")
        pid = row.get("prompt_id")
        if pid not in where:
            raise TryError(f"{path}:{line}: prompt_id {pid!r} is not a row of data.train ({cfg.data.train}, "
                           f"{len(ds)} rows): has the data changed since the run?")
        data_row = ds[where[pid]]
        step = row.get("step", row.get("round", 0))
        items.append(_logged(Item(step=step, prompt_id=pid, prompt=row.get("prompt", data_row["prompt"]),
                                  completion=row["completion"], columns={c: data_row[c] for c in extra},
                                  group=(step, pid)), row))
    return items


def items_from_file(path: Path, prompt_column: str) -> list[Item]:
    """Hand-written rows: {"row": {prompt, other columns...}, "completion"} or {"prompt", "completion"}."""
    items, ids = [], {}
    for line, row in numbered_rows(path, "--completions"):
        data = row.get("row")
        if data is not None and not isinstance(data, dict):
            raise TryError(f"{path}:{line}: `row` must be an object of data columns, got {type(data).__name__}")
        data = dict(data or {})
        key = prompt_column if prompt_column in data else "prompt"
        prompt = data.pop(key, row.get("prompt"))
        if not _text_or_messages(prompt):
            raise TryError(f"{path}:{line}: no prompt: give \"prompt\" (text or chat messages) or \"row\" with a "
                           f"{prompt_column!r} column")
        if not _text_or_messages(row.get("completion")):
            raise TryError(f"{path}:{line}: no \"completion\" text")
        pid = data.pop("prompt_id", row.get("prompt_id"))
        _checked(path, line, {**row, "prompt_id": pid})
        if pid is None:
            pid = ids.setdefault(json.dumps(prompt, sort_keys=True), len(ids))
        step = row.get("step", 0)
        items.append(_logged(Item(step=step, prompt_id=pid, prompt=prompt, completion=row["completion"],
                                  columns=data, group=(step, json.dumps(pid))), row))
    return items


def items_from_model(cfg: RlftConfig, suite, n: int, max_prompts: int) -> list[Item]:
    """n fresh samples for each of the first `max_prompts` training prompts (checked and fitted as training
    does) from the configured model, with the stage's sampling settings and train.seed; no training."""
    from rlft.models.loading import ModelLoadError, load_policy, load_policy_tokenizer
    from rlft.posttrain.evaluate import sampling_section
    from rlft.rollout import SamplingParams
    from rlft.rollout.sampler import SamplerSettings, sampler_for
    from rlft.rollout.score import sampled_columns
    from rlft.errors import RunError
    from rlft.runtime import quiet_libraries
    from rlft.stages.common.prompt_data import prepare_prompt_data

    if cfg.env.name:
        raise TryError(f"env.name={cfg.env.name}: this config's rewards come from its environment's episodes; "
                       f"--sample scores single completions with rewards: functions")
    quiet_libraries(False)
    try:
        tokenizer = load_policy_tokenizer(cfg)
        ds = prepare_prompt_data(cfg, tokenizer, suite)
        ds = ds.select(range(min(max_prompts, len(ds))))
        model = load_policy(cfg)
    except (RunError, ModelLoadError) as exc:
        raise TryError(str(exc)) from None
    import torch

    if cfg.hw.device in ("cuda", "auto") and torch.cuda.is_available():
        model = model.to("cuda")
    s = sampling_section(cfg)
    params = SamplingParams(temperature=s.temperature, top_p=getattr(s, "top_p", 1.0), max_new_tokens=s.max_tokens,
                            batch_size=64, seed=cfg.train.seed)
    rows = ds.to_list()
    from rlft import progress

    sampler = sampler_for(model, tokenizer, SamplerSettings.from_config(cfg))  # sampling.backend
    with progress.task("rewards try: sampling", total=len(rows) * n, unit="completions") as bar:
        rolls = sampler.sample([r["prompt"] for r in rows], params, n, prompt_ids=[r["prompt_id"] for r in rows],
                               progress=bar.callback())
    sampled = sampled_columns(rolls)  # token counts and budget, for the rewards that name them (overlong_penalty)
    items = []
    for i, p in enumerate(rolls.prompt_index):
        cols = {k: v for k, v in rows[p].items() if k not in ("prompt", "prompt_id")}
        cols.update({k: v[i] for k, v in sampled.items()})
        items.append(Item(step=0, prompt_id=rows[p]["prompt_id"], prompt=rows[p]["prompt"],
                          completion=rolls.completions[i], columns=cols, group=p))
    return items


# -- scoring -----------------------------------------------------------------------------------------
@dataclass
class Scored:
    per_reward: dict[str, list[float | None]]
    total: list[float | None]
    calls: dict[str, list[dict]]      # per reward, one suite.pop_logs() row per call


def score_items(suite, items: list[Item]) -> Scored:
    """Every item scored by the suite, one call per group (a prompt's completions), in the items' order."""
    from rlft.rollout.score import score_texts

    groups: dict[Hashable, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault(it.group, []).append(i)
    per_reward = {name: [None] * len(items) for name in suite.names}
    total: list[float | None] = [None] * len(items)
    calls: dict[str, list[dict]] = {name: [] for name in suite.names}
    suite.capture_logs(True)  # per call: its time, what it printed, its errors with their tracebacks
    quiet = logging.getLogger("rlft.rewards")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the trial reports each failure with its traceback itself
    try:
        for rows in groups.values():
            keys = list(dict.fromkeys(k for i in rows for k in items[i].columns))
            columns = {k: [items[i].columns.get(k) for i in rows] for k in keys}
            scores = score_texts(suite, [items[i].prompt for i in rows], [items[i].completion for i in rows],
                                 columns, count=False)
            for j, i in enumerate(rows):
                total[i] = scores.total[j]
                for name in suite.names:
                    per_reward[name][i] = scores.per_reward[name][j]
            for log in suite.pop_logs():
                calls[log["reward"]].append(log)
    finally:
        quiet.setLevel(level)
    return Scored(per_reward=per_reward, total=total, calls=calls)


def trial_of(suite, items: list[Item], scored: Scored, max_failure_fraction: float):
    from rlft.rewards.trial import Trial, reward_stats

    prompt_of = [it.group for it in items]
    rewards = []
    for r in suite.rewards:
        log = scored.calls[r.name]
        rewards.append(reward_stats(r.name, scored.per_reward[r.name], prompt_of, [c["ms"] for c in log],
                                    [c.get("error") or "" for c in log], [c.get("output") or "" for c in log],
                                    weight=r.weight))
    per_call = [sum(c) for c in zip(*([c["ms"] for c in scored.calls[r.name]] for r in suite.rewards))]
    total = reward_stats("total", scored.total, prompt_of, per_call)
    return Trial(rewards, total, max_failure_fraction)


def write_rows(out: Path, items: list[Item], scored: Scored) -> None:
    """completions.jsonl's rows (one per completion), so `rlft report` reads them like a run's."""
    from rlft.data.messages import as_text
    from rlft.rollout.log import CompletionLog

    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    log = CompletionLog(out, -1)
    start = 0
    while start < len(items):  # one write per run of rows of the same step
        end = start
        while end < len(items) and items[end].step == items[start].step:
            end += 1
        part = range(start, end)
        log.write(items[start].step, [items[i].prompt_id for i in part], [as_text(items[i].prompt) for i in part],
                  [as_text(items[i].completion) for i in part],
                  {name: [v[i] for i in part] for name,
                   v in scored.per_reward.items()}, [scored.total[i] for i in part])
        start = end


def try_rewards(cfg: RlftConfig, composed, *, from_run: Path | None, completions: Path | None,
                sample: int | None, max_prompts: int, out: Path, strict: bool,
                echo: Callable[[str], None] = print, force: bool = True, shown: Path | None = None) -> int:
    """Score, print the statistics and the verdict, write the rows; 4 with `strict` when a reward failed or
    has no signal, else 0. `out` (and the sources) as resolved when the command started, before any reward code
    ran (a reward may chdir); `shown`: `out` as the user wrote it; without `force` a file that appeared at `out`
    meanwhile is not replaced."""
    check_counts(sample, max_prompts if sample is not None else None)
    from rlft.rewards.trial import compare
    from rlft.errors import RunError
    from rlft.stages.common.prompt_data import reward_suite

    if not cfg.rewards:
        raise TryError("the config has no rewards to try (rewards: [{fn: ...}])")
    try:
        suite = reward_suite(cfg, composed)
    except RunError as exc:
        raise TryError(str(exc)) from None
    if from_run is not None:
        items, source = items_from_run(from_run, cfg), f"logged by {from_run}"
    elif completions is not None:
        items, source = items_from_file(completions, cfg.data.prompt_column), f"from {completions}"
    else:
        items = items_from_model(cfg, suite, sample, max_prompts)
        source = f"sampled from {cfg.model.name_or_path}, {sample} per prompt"
    scored = score_items(suite, items)
    trial = trial_of(suite, items, scored, cfg.monitor.max_reward_failure_fraction)
    prompts = len({it.group for it in items})
    echo(f"rewards try: {len(items)} completions of {prompts} prompts {source}; one reward call per prompt")
    for line in trial.table():
        echo(line)
    for line in trial.details():
        echo(line)
    logged = [it for it in items if it.logged]
    if logged and len(logged) == len(items):
        for line in compare(suite.names, scored.per_reward, scored.total, [it.logged_rewards for it in items],
                            [it.logged_total for it in items]):
            echo(line)
    if not force and (out.exists() or out.is_symlink()):
        raise TryError(f"-o file {shown or out} appeared while the rewards ran (was a reward's code writing it?); "
                       f"not replaced: choose another path or pass --force")
    write_rows(out, items, scored)
    echo(trial.verdict())
    echo(f"scored rows written to {shown or out} (browse them: rlft report {shown or out})")
    problems = trial.problems()
    if strict and problems:
        echo(f"--strict: {'; '.join(problems)}")
        return 4
    return 0
