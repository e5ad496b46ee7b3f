"""The built-in `llm_judge` reward: an LLM behind an OpenAI-compatible chat-completions endpoint scores each
completion.

    - fn: llm_judge
      timeout_s: 300                       # the whole batch's calls (rewards[].timeout_s), retries included
      kwargs:
        base_url: http://127.0.0.1:8000/v1 # POST {base_url}/chat/completions
        model: Qwen/Qwen2.5-7B-Instruct
        api_key_env: JUDGE_API_KEY         # the variable holding the key; the key itself is never written anywhere
        template: "Question: {prompt}\\nAnswer: {completion}\\nReference: {answer}\\nScore 0-10:"
        score: {kind: number, min: 0, max: 10}   # or labels: {good: 1.0, bad: 0.0}
        extra_body: {structured_outputs: {choice: [good, bad]}}   # optional: more request fields, as given

Each completion is one request (`template` filled with `{prompt}`, `{completion}` and any dataset column), at
most `concurrency` at once, each with `timeout_s` per try and `retries` more tries, `backoff_s` doubling, on
429, 5xx, timeouts and dropped connections (never on 400/401: trying again cannot help). The reply's text is
parsed into a score in [0, 1]: the first number, in [min, max], scaled; or the label that appears first.
`extra_body` adds request fields as given (a vLLM server's `structured_outputs: {choice: [...]}` makes the judge
answer one of the labels). Replies are cached by (model, system, template, filled-in message, extra_body when set)
in `<run>/judge_cache.jsonl` (append-only; the parser reads the cached reply, so changing it costs nothing), so a
resumed or repeated run pays for no judgement twice.

A completion whose judgement failed (bad reply, retries spent) gets no score and is counted in
`rewards/<name>/errors` like any reward failure; a judge that cannot be reached or rejects the key fails the
whole batch with one line naming the URL or the key's variable, and the failure guard stops the run (exit 4).
Before a run, `preflight` checks the key's variable is set (exit 2), the server accepts connections (exit 4)
and, where it serves `GET {base_url}/models`, accepts the key (exit 2).

Standard library only (urllib, threads), imported when a judge first runs: validate-config stays light.
"""

from __future__ import annotations

import json
import logging
import os
import re
import string
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlft import run_files
from rlft.numeric import is_number

__all__ = ["llm_judge", "check_kwargs", "parse_reply", "template_fields", "JudgeError", "CACHE_FILE"]

logger = logging.getLogger("rlft.rewards")

CACHE_FILE = run_files.JUDGE_CACHE
# the fields a template may always use; every other `{name}` is a dataset column
BUILT_IN_FIELDS = ("prompt", "completion")
DEFAULTS: dict[str, Any] = {"concurrency": 4, "timeout_s": 30.0, "retries": 3, "backoff_s": 1.0, "max_tokens": 64,
                            "temperature": 0.0, "system": None, "cache": True, "extra_body": None}
# request fields rlft fills itself: extra_body cannot replace them
RESERVED_BODY = ("model", "messages", "stream", "n")
ALLOWED = ("base_url", "model", "api_key_env", "template", "score", "labels", *DEFAULTS)
_MAX_BACKOFF_S = 60.0
_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JudgeError(Exception):
    """A judgement that failed; the message names the URL or the key's variable, never the key."""

    expected = True  # a failure the message explains: rlft.rewards.safe logs it without a traceback


class JudgeUnreachable(JudgeError):
    """Connection refused, unknown host: the server is not there."""


class JudgeKeyRejected(JudgeError):
    """HTTP 401/403."""


class _Retriable(JudgeError):
    """429, 5xx, a timeout, a dropped connection: worth another try."""


# -- settings, checked without network ---------------------------------------------------------------------------
def template_fields(template: str) -> list[str]:
    """The `{name}` fields of a template, in order, without repeats (ValueError for a malformed one)."""
    names = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    bad = [n for n in names if not n or not n.isidentifier()]
    if bad:
        raise ValueError(f"template fields must be plain names such as {{prompt}}, got {{{bad[0]}}} "
                         f"(write {{{{ and }}}} for literal braces)")
    return list(dict.fromkeys(names))


def required_columns(kwargs: Mapping[str, Any]) -> list[str]:
    """The dataset columns the template reads (all its fields but {prompt} and {completion})."""
    template = kwargs.get("template")
    if not isinstance(template, str):
        return []
    try:
        return [f for f in template_fields(template) if f not in BUILT_IN_FIELDS]
    except ValueError:
        return []  # reported by check_kwargs


def check_kwargs(kwargs: Mapping[str, Any]) -> list[str]:
    """Every problem with a judge's configured kwargs ([] when fine); no network, no environment."""
    from urllib.parse import urlsplit

    problems = []
    unknown = sorted(set(map(str, kwargs)) - set(ALLOWED))
    if unknown:
        problems.append(f"unknown kwargs {', '.join(unknown)} (allowed: {', '.join(ALLOWED)})")
    url = kwargs.get("base_url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(f"kwargs.base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}")
    elif parts.query or parts.fragment:
        problems.append(f"kwargs.base_url must not carry a query or fragment, got {url!r}")
    if not isinstance(kwargs.get("model"), str) or not kwargs["model"].strip():
        problems.append("kwargs.model must name the judge's model as its server knows it")
    env = kwargs.get("api_key_env")
    if not isinstance(env, str) or not _ENV_NAME_RE.match(env):
        problems.append(f"kwargs.api_key_env must name the environment variable that holds the API key (the key "
                        f"itself never goes in a config), got {env!r}")
    template = kwargs.get("template")
    if not isinstance(template, str) or not template.strip():
        problems.append("kwargs.template must be the judge's prompt, with {prompt} and {completion} where they go")
    else:
        try:
            fields = template_fields(template)
            if "completion" not in fields:
                problems.append("kwargs.template has no {completion} field: the judge would never see what it scores")
        except ValueError as exc:
            problems.append(f"kwargs.template: {exc}")
    problems += _check_parser(kwargs.get("score"), kwargs.get("labels"))
    for key, low, whole in (("concurrency", 1, True), ("retries", 0, True), ("max_tokens", 1, True),
                            ("timeout_s", 0, False), ("backoff_s", 0, False), ("temperature", 0, False)):
        value = kwargs.get(key, DEFAULTS[key])
        if not is_number(value) or value < low or (whole and value != int(value)) or (key == "timeout_s"
                                                                                     and value <= 0):
            kind = "a whole number" if whole else "a number"
            problems.append(f"kwargs.{key} must be {kind} {'>' if key == 'timeout_s' else '>='} {low}, got {value!r}")
    if kwargs.get("system") is not None and not isinstance(kwargs.get("system"), str):
        problems.append(f"kwargs.system must be text (the judge's system message), got {kwargs['system']!r}")
    if not isinstance(kwargs.get("cache", True), bool):
        problems.append(f"kwargs.cache must be true or false, got {kwargs['cache']!r}")
    extra = kwargs.get("extra_body")
    if extra is not None:
        if not isinstance(extra, Mapping):
            problems.append(f"kwargs.extra_body must map request fields to values (e.g. vLLM's structured_outputs: "
                            f"{{choice: [good, bad]}}), got {extra!r}")
        elif clash := sorted(set(map(str, extra)) & set(RESERVED_BODY)):
            problems.append(f"kwargs.extra_body sets {', '.join(clash)}, which rlft fills itself (one reply per "
                            f"request, from kwargs.model and the template)")
        else:
            try:
                json.dumps(extra)
            except (TypeError, ValueError) as exc:
                problems.append(f"kwargs.extra_body must be plain JSON values: {exc}")
    return problems


def _check_parser(score: Any, labels: Any) -> list[str]:
    if (score is None) == (labels is None):
        return ["set one of kwargs.score ({kind: number, min: 0, max: 10}: a number scaled to 0-1) or kwargs.labels "
                "({good: 1.0, bad: 0.0}: the label the judge answers, mapped to a score)"]
    if labels is not None:
        if not isinstance(labels, Mapping) or not labels:
            return [f"kwargs.labels must map each label to its score, e.g. {{good: 1.0, bad: 0.0}}, got {labels!r}"]
        bad = [k for k, v in labels.items() if not is_number(v) or not str(k).strip()]
        return [f"kwargs.labels.{bad[0]} must be a number"] if bad else []
    if not isinstance(score, Mapping):
        return [f"kwargs.score must be {{kind: number, min: 0, max: 10}}, got {score!r}"]
    problems = []
    unknown = sorted(set(map(str, score)) - {"kind", "min", "max"})
    if unknown:
        problems.append(f"kwargs.score: unknown keys {', '.join(unknown)} (allowed: kind, min, max)")
    if score.get("kind", "number") != "number":
        problems.append(f"kwargs.score.kind must be number (for labels set kwargs.labels), got {score.get('kind')!r}")
    low, high = score.get("min", 0), score.get("max")
    if not is_number(low) or not is_number(high) or not high > low:
        problems.append(f"kwargs.score needs numbers min < max (the judge's scale), got min={low!r} max={high!r}")
    return problems


# -- the reply parsed ----------------------------------------------------------------------------------------------
def parse_reply(text: str, score: Mapping[str, Any] | None = None,
                labels: Mapping[str, Any] | None = None) -> float | None:
    """The score in a judge's reply: with `score`, the first number, which must lie in [min, max], scaled to
    [0, 1]; with `labels`, the value of the label that appears first (a whole word, any case). None when the
    reply holds no such number or label."""
    if labels is not None:
        best: tuple[int, float] | None = None
        for label, value in labels.items():
            found = re.search(rf"(?<!\w){re.escape(str(label).strip())}(?!\w)", text, re.IGNORECASE)
            if found and (best is None or found.start() < best[0]):
                best = (found.start(), float(value))
        return None if best is None else best[1]
    score = score or {}
    low, high = float(score.get("min", 0)), float(score.get("max", 1))
    found = _NUMBER_RE.search(text)
    if found is None:
        return None
    value = float(found.group(0))
    if not low <= value <= high:
        return None
    return (value - low) / (high - low)


# -- the cache ---------------------------------------------------------------------------------------------------
class ReplyCache:
    """Replies by key, in memory and, once bound to a run folder, appended to its judge_cache.jsonl (one JSON row
    a reply: `key`, `reply`); a torn last line, from a run killed mid-write, is skipped on reading."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.replies: dict[str, str] = {}
        self._lock = threading.Lock()

    def bind(self, folder: Path | None) -> None:
        path = None if folder is None else Path(folder) / CACHE_FILE
        if path == self.path:
            return
        with self._lock:
            self.path, self.replies = path, {}
            if path is not None and path.is_file():
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    try:
                        row = json.loads(line)
                        self.replies[str(row["key"])] = str(row["reply"])
                    except (ValueError, KeyError, TypeError):
                        continue

    def get(self, key: str) -> str | None:
        return self.replies.get(key)

    def put(self, key: str, reply: str) -> None:
        with self._lock:
            self.replies[key] = reply
            if self.path is not None:
                # one write of a whole line in append mode: processes sharing the run folder do not interleave
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": key, "reply": reply}, ensure_ascii=False) + "\n")


def cache_key(model: str, system: str | None, template: str, message: str, extra_body: Mapping | None = None) -> str:
    """The reply cache's key; `extra_body` (which can constrain the reply) joins it only when set, so caches written
    without it stay valid."""
    import hashlib  # here: OpenSSL loads only when a judge runs, not for every validate-config

    parts: list[Any] = [model, system, template, message]
    if extra_body:
        parts.append(json.loads(json.dumps(extra_body, sort_keys=True)))
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


# -- HTTP ----------------------------------------------------------------------------------------------------------
def _scrub(text: str, key: str | None) -> str:
    """A server's error text, short, with the key cut out should the server echo it."""
    text = " ".join(str(text).split())[:200]
    return text.replace(key, "***") if key else text


def _connection_failure(url: str, reason: Any) -> JudgeError:
    """A urllib connection error as a judge error: refused or unknown host cannot be fixed by trying again."""
    import socket

    if isinstance(reason, (ConnectionRefusedError, socket.gaierror)):
        what = "connection refused" if isinstance(reason, ConnectionRefusedError) else "unknown host"
        return JudgeUnreachable(f"cannot reach the judge at {url} ({what})")
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return _Retriable(f"the judge at {url} did not answer in time")
    return _Retriable(f"connection to the judge at {url} failed ({type(reason).__name__})")


def _post(url: str, body: dict, key: str | None, key_env: str, timeout_s: float) -> str:
    """The reply's text to one request; JudgeError on failure (a _Retriable carries the server's Retry-After)."""
    import http.client
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = _scrub(exc.read().decode("utf-8", "replace"), key) if exc.fp is not None else ""
        if exc.code in (401, 403):
            raise JudgeKeyRejected(f"the judge at {url} rejected the API key in ${key_env} (HTTP {exc.code})") \
                from None
        if exc.code == 429 or exc.code >= 500:
            wait = exc.headers.get("Retry-After") if exc.headers else None
            error = _Retriable(f"the judge at {url} answered HTTP {exc.code}: {detail}")
            error.retry_after = float(wait) if wait and wait.replace(".", "", 1).isdigit() else None
            raise error from None
        raise JudgeError(f"the judge at {url} refused the request, HTTP {exc.code}: {detail}") from None
    except urllib.error.URLError as exc:
        raise _connection_failure(url, exc.reason) from None
    except (TimeoutError, OSError, http.client.HTTPException) as exc:
        raise _connection_failure(url, exc) from None
    try:
        reply = json.loads(raw)["choices"][0]["message"]["content"]
        if not isinstance(reply, str):
            raise TypeError
    except (ValueError, KeyError, IndexError, TypeError):
        raise JudgeError(f"the judge at {url} sent a reply that is not a chat completion: "
                         f"{_scrub(raw.decode('utf-8', 'replace'), key)!r}") from None
    return reply


# -- the judge ---------------------------------------------------------------------------------------------------
class Judge:
    """One configured judge: its settings, reply cache and counters, kept across calls (found by its kwargs)."""

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        problems = check_kwargs(kwargs)
        if problems:
            raise ValueError(f"llm_judge: {problems[0]}")
        self.settings = {**DEFAULTS, **kwargs}
        s = self.settings
        self.url = str(s["base_url"]).rstrip("/") + "/chat/completions"
        self.base_url = str(s["base_url"]).rstrip("/")
        self.cache = ReplyCache()
        self.counts = {"requests": 0, "cached": 0, "retries": 0}
        self._lock = threading.Lock()
        self._sleep = time.sleep  # tests read the waits instead of sleeping them
        self._warned: set[str] = set()

    def key(self) -> str | None:
        return os.environ.get(self.settings["api_key_env"]) or None

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] += n

    def pop_counts(self) -> dict[str, float]:
        with self._lock:
            counts, self.counts = self.counts, {k: 0 for k in self.counts}
        return {f"judge_{k}": float(v) for k, v in counts.items()}

    def message(self, prompt: Any, completion: Any, row: Mapping[str, Any]) -> str:
        from rlft.rewards.builtin import completion_text

        fields = {**{k: "" if v is None else v for k, v in row.items()},
                  "prompt": completion_text(prompt), "completion": completion_text(completion)}
        return self.settings["template"].format_map(fields)

    def ask(self, message: str) -> str:
        """The judge's reply to one message, retried with backoff on what another try can fix."""
        s = self.settings
        body = {"model": s["model"], "temperature": s["temperature"], "max_tokens": int(s["max_tokens"]),
                "messages": ([{"role": "system", "content": s["system"]}] if s["system"] else [])
                + [{"role": "user", "content": message}]}
        body.update(s["extra_body"] or {})  # e.g. vLLM's structured_outputs, OpenAI's response_format
        for attempt in range(int(s["retries"]) + 1):
            self._count("requests")
            try:
                return _post(self.url, body, self.key(), s["api_key_env"], float(s["timeout_s"]))
            except _Retriable as exc:
                if attempt == int(s["retries"]):
                    raise JudgeError(f"{exc}; gave up after {attempt + 1} tries") from None
                wait = getattr(exc, "retry_after", None)
                self._count("retries")
                self._sleep(min(_MAX_BACKOFF_S, wait if wait is not None else float(s["backoff_s"]) * 2 ** attempt))
        raise AssertionError("unreachable")

    def judge_one(self, message: str) -> str:
        s = self.settings
        key = cache_key(s["model"], s["system"], s["template"], message, s["extra_body"])
        if s["cache"]:
            cached = self.cache.get(key)
            if cached is not None:
                self._count("cached")
                return cached
        reply = self.ask(message)
        if s["cache"]:
            self.cache.put(key, reply)
        return reply

    def score(self, prompts: list[Any], completions: list[Any], columns: Mapping[str, Any]) -> list[float | None]:
        from rlft.rewards.run_folder import run_folder

        n = len(completions)
        self.cache.bind(run_folder())
        rows = [{k: v[i] for k, v in columns.items() if isinstance(v, (list, tuple)) and len(v) == n}
                for i in range(n)]
        messages = [self.message(p, c, r) for p, c, r in zip(prompts, completions, rows)]
        replies: list[str | None] = [None] * n
        errors: list[JudgeError | None] = [None] * n
        todo = list(range(n))
        todo_lock = threading.Lock()

        def worker() -> None:
            while True:
                with todo_lock:
                    if not todo:
                        return
                    i = todo.pop(0)
                try:
                    replies[i] = self.judge_one(messages[i])
                except JudgeError as exc:
                    errors[i] = exc
                    if isinstance(exc, (JudgeUnreachable, JudgeKeyRejected)):
                        with todo_lock:
                            todo.clear()  # every other request would fail the same way

        # daemon threads, at most `concurrency`: a hung server never holds the process open at exit
        threads = [threading.Thread(target=worker, name="rlft-judge", daemon=True)
                   for _ in range(min(int(self.settings["concurrency"]), n))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fatal = next((e for e in errors if isinstance(e, (JudgeUnreachable, JudgeKeyRejected))), None)
        if fatal is not None:
            raise fatal
        if n and all(e is not None for e in errors):
            raise errors[0]  # one clear reason for the batch's failure
        scores: list[float | None] = []
        for i, reply in enumerate(replies):
            if errors[i] is not None or reply is None:
                self._warn_once(str(errors[i]))
                scores.append(None)
                continue
            value = parse_reply(reply, self.settings.get("score"), self.settings.get("labels"))
            if value is None:
                self._warn_once(f"a reply held no score the parser reads ({self._parser_text()}): {reply[:120]!r}")
            scores.append(value)
        return scores

    def _parser_text(self) -> str:
        labels = self.settings.get("labels")
        if labels is not None:
            return "one of the labels " + ", ".join(map(str, labels))
        score = self.settings["score"]
        return f"a number in [{score.get('min', 0)}, {score.get('max')}]"

    def _warn_once(self, message: str) -> None:
        kind = message.split(":")[0]
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning("llm_judge: %s; that completion gets no score (counted in rewards/<name>/errors)", message)

    def preflight(self) -> None:
        """Before a run: the key's variable set (exit 2), the server taking connections (exit 4), and the key
        accepted where the server lists its models at GET {base_url}/models (exit 2). Costs no judgement."""
        import socket
        import urllib.error
        import urllib.request
        from urllib.parse import urlsplit

        from rlft.errors import RunError

        env = self.settings["api_key_env"]
        key = self.key()
        if key is None:
            raise RunError(f"reward llm_judge: the environment variable {env} (kwargs.api_key_env) is not set; "
                           f"export the judge's API key in it (any non-empty value for a server without keys)")
        parts = urlsplit(self.base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        wait = min(float(self.settings["timeout_s"]), 10.0)
        try:
            socket.create_connection((parts.hostname, port), timeout=wait).close()
        except OSError as exc:
            raise RunError(f"reward llm_judge: {_connection_failure(self.base_url, exc)}", exit_code=4) from None
        request = urllib.request.Request(self.base_url + "/models", headers={"Authorization": f"Bearer {key}"})
        try:
            urllib.request.urlopen(request, timeout=wait).close()
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise RunError(f"reward llm_judge: the judge at {self.base_url} rejected the API key in ${env} "
                               f"(HTTP {exc.code}); check the key that variable holds") from None
        except (OSError, ValueError):
            pass  # a server without /models, or slow to list them: the judgements themselves will tell


_JUDGES: dict[str, Judge] = {}
_JUDGES_LOCK = threading.Lock()


def judge_for(kwargs: Mapping[str, Any]) -> Judge:
    """The judge these settings make, one per distinct settings in a process (its cache and counters live on)."""
    settings = {k: kwargs[k] for k in ALLOWED if k in kwargs}
    ident = json.dumps(settings, sort_keys=True, default=str)
    with _JUDGES_LOCK:
        judge = _JUDGES.get(ident)
        if judge is None:
            judge = _JUDGES[ident] = Judge(settings)
        return judge


def llm_judge(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
    """Each completion scored in [0, 1] by an LLM judge (see the module's text for the kwargs); dataset columns
    arrive in `kwargs` beside the settings and fill the template's other fields."""
    n = len(completions)
    # a dataset column that shares a setting's name (`system`, `model`) arrives as one value per row: it is data
    # for the template, never a setting (configured settings are single values, and win over columns anyway)
    per_row = {k for k, v in kwargs.items() if isinstance(v, (list, tuple)) and len(v) == n}
    settings = {k: v for k, v in kwargs.items() if k in ALLOWED and k not in per_row}
    columns = {k: v for k, v in kwargs.items() if k not in settings}
    return judge_for(settings).score(prompts, completions, columns)


def _pop_metrics(kwargs: Mapping[str, Any]) -> dict[str, float]:
    settings = {k: kwargs[k] for k in ALLOWED if k in kwargs}
    try:
        return judge_for(settings).pop_counts()
    except ValueError:
        return {}


llm_judge.required_columns = required_columns  # type: ignore[attr-defined]
llm_judge.check_kwargs = check_kwargs  # type: ignore[attr-defined]
llm_judge.preflight = lambda kwargs: judge_for(kwargs).preflight()  # type: ignore[attr-defined]
llm_judge.pop_metrics = _pop_metrics  # type: ignore[attr-defined]
