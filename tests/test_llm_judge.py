"""The `llm_judge` reward against a real HTTP server on 127.0.0.1 (tests/judge_server.py): the reply parser, the
settings check, retries and backoff, bounded concurrency, per-request timeouts, the reply cache, the key kept out
of every message and file, and the checks before a run."""

from __future__ import annotations

import json
import socket
import time

import pytest

from rlft.errors import RunError
from rlft.rewards import llm_judge as lj
from rlft.rewards.registry import check_reward_kwargs, reward_columns
from rlft.rewards.run_folder import set_run_folder
from rlft.rewards.safe import build_reward_suite
from tests.judge_server import JudgeServer

KEY = "sk-test-0123456789abcdef"
TEMPLATE = "Prompt: {prompt}\nTarget letter: {target}\n<c>{completion}</c>\nScore 0-10:"


@pytest.fixture(scope="module")
def server():
    with JudgeServer(key=KEY) as s:
        yield s


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test its own judges (their caches and counters) and no run folder; the key in the environment."""
    monkeypatch.setenv("JUDGE_KEY", KEY)
    lj._JUDGES.clear()
    set_run_folder(None)
    yield
    lj._JUDGES.clear()
    set_run_folder(None)


def settings(server, **over):
    return {"base_url": server.base_url, "model": "judge", "api_key_env": "JUDGE_KEY", "template": TEMPLATE,
            "score": {"kind": "number", "min": 0, "max": 10}, "backoff_s": 0.01, **over}


def judge(server, completions, targets=None, **over):
    targets = targets or ["z"] * len(completions)
    return lj.llm_judge(["Repeat z"] * len(completions), completions, target=targets, **settings(server, **over))


def test_parse_reply_numbers_and_labels():
    scale = {"kind": "number", "min": 0, "max": 10}
    assert lj.parse_reply("Score: 7", scale) == pytest.approx(0.7)
    assert lj.parse_reply("7.5/10", scale) == pytest.approx(0.75)  # the first number is the score
    assert lj.parse_reply("-3", {"min": -5, "max": 5}) == pytest.approx(0.2)
    assert lj.parse_reply("Score: 11", scale) is None  # outside the scale: not a score
    assert lj.parse_reply("no idea", scale) is None
    labels = {"good": 1.0, "bad": 0.0, "ok": 0.5}
    assert lj.parse_reply("Verdict: GOOD.", labels=labels) == 1.0
    assert lj.parse_reply("bad, though good in parts", labels=labels) == 0.0  # the first label counts
    assert lj.parse_reply("badly written", labels=labels) is None  # whole words only
    assert lj.parse_reply("okay", labels=labels) is None


def test_settings_check_names_each_problem_without_network():
    good = {"base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key_env": "K", "template": TEMPLATE,
            "labels": {"good": 1, "bad": 0}}
    assert check_reward_kwargs("llm_judge", good) == []
    cases = {"base_url": ("localhost:8000", "http(s) URL"), "api_key_env": ("sk-abc-123", "api_key_env"),
             "template": ("Rate {prompt}", "no {completion}"), "concurrency": (0, "concurrency"),
             "timeout_s": (0, "timeout_s"), "retries": (1.5, "retries"), "bogus": (1, "unknown kwargs bogus")}
    for key, (value, said) in cases.items():
        problems = check_reward_kwargs("llm_judge", {**good, key: value})
        assert len(problems) == 1 and said in problems[0][1], (key, problems)
    both = check_reward_kwargs("llm_judge", {**good, "score": {"min": 0, "max": 10}})
    assert "set one of kwargs.score" in both[0][1]
    assert "min < max" in check_reward_kwargs("llm_judge", {**{k: v for k, v in good.items() if k != "labels"},
                                                            "score": {"min": 5, "max": 5}})[0][1]
    assert "plain names" in check_reward_kwargs("llm_judge", {**good, "template": "{completion} {0}"})[0][1]
    # the template's other fields are dataset columns, checked against the data like any reward's columns
    assert reward_columns("llm_judge", {**good, "template": "{prompt} {completion} {target} {answer}"}) == \
        ["target", "answer"]


def test_scores_number_and_label_replies(server):
    server.reset("score")
    assert judge(server, ["zzz", "abc", "z"]) == pytest.approx([0.9, 0.1, 0.9])
    body = server.bodies[0]
    assert body["model"] == "judge" and body["temperature"] == 0.0
    assert body["messages"][-1]["content"] in {TEMPLATE.format(prompt="Repeat z", target="z", completion=c)
                                               for c in ("zzz", "abc", "z")}
    assert all(h.get("Authorization") == f"Bearer {KEY}" for h in server.headers)
    # a dataset column named like a setting is data for the template, not the setting
    server.reset("score")
    assert lj.llm_judge(["p"], ["z"], target=["z"], system=["row's own system column"],
                        **settings(server, template="{system} " + TEMPLATE)) == pytest.approx([0.9])
    assert server.bodies[0]["messages"] == [{"role": "user", "content": "row's own system column " + TEMPLATE.format(
        prompt="p", target="z", completion="z")}]
    server.reset("label")
    assert judge(server, ["zz", "ab"], labels={"good": 1.0, "bad": 0.0}, score=None) == [1.0, 0.0]


def test_extra_body_goes_into_each_request_and_its_cache_key(server):
    server.reset("label")
    extra = {"structured_outputs": {"choice": ["good", "bad"]}, "seed": 7}
    assert judge(server, ["zz", "ab"], labels={"good": 1.0, "bad": 0.0}, score=None, extra_body=extra) == [1.0, 0.0]
    assert all(b["structured_outputs"] == {"choice": ["good", "bad"]} and b["seed"] == 7 for b in server.bodies)
    assert all(b["model"] == "judge" and len(b["messages"]) == 1 for b in server.bodies)
    key = lj.cache_key("m", None, "t", "msg")
    assert lj.cache_key("m", None, "t", "msg", None) == key  # caches written without it stay valid
    assert lj.cache_key("m", None, "t", "msg", {"seed": 7}) != key
    assert lj.cache_key("m", None, "t", "msg", {"a": 1, "b": 2}) == \
        lj.cache_key("m", None, "t", "msg", {"b": 2, "a": 1})
    good = settings(server, labels={"good": 1, "bad": 0}, score=None)
    for extra, said in (([1], "must map request fields"), ({"messages": []}, "sets messages"),
                        ({"model": "x", "n": 2}, "sets model, n"), ({"x": object()}, "plain JSON")):
        problems = check_reward_kwargs("llm_judge", {**good, "extra_body": extra})
        assert len(problems) == 1 and said in problems[0][1], (extra, problems)


def test_retries_500s_with_backoff_then_succeeds(server):
    server.reset("flaky", failures=2)
    j = lj.judge_for(settings(server, concurrency=1, backoff_s=0.5))
    waits = []
    j._sleep = waits.append
    assert j.score(["p"], ["z"], {"target": ["z"]}) == pytest.approx([0.9])
    assert server.requests == 3 and waits == [0.5, 1.0]  # exponential backoff
    assert j.pop_counts() == {"judge_requests": 3.0, "judge_cached": 0.0, "judge_retries": 2.0}
    server.reset("flaky", failures=5)
    with pytest.raises(lj.JudgeError, match="HTTP 500.*gave up after 2 tries"):
        judge(server, ["z"], retries=1)
    assert server.requests == 2


def test_malformed_and_rejected_replies_are_not_retried(server):
    server.reset("malformed")
    suite = build_reward_suite([{"fn": "llm_judge", "kwargs": settings(server)}], min_completions=1000)
    scores = suite.score(["p", "p"], ["z", "a"], {"target": ["z", "z"]})
    assert scores.per_fn["llm_judge"] == [None, None] and server.requests == 2
    assert "not a chat completion" in suite.rewards[0].last_error
    assert suite.metrics()["rewards/llm_judge/errors"] == 2.0
    server.reset("bad_request")
    suite = build_reward_suite([{"fn": "llm_judge", "kwargs": settings(server)}], min_completions=1000)
    assert suite.score(["p"], ["z"], {"target": ["z"]}).per_fn["llm_judge"] == [None] and server.requests == 1
    assert "refused the request, HTTP 400: " in suite.rewards[0].last_error and "too large" in \
        suite.rewards[0].last_error
    server.reset("unauthorized")
    with pytest.raises(lj.JudgeKeyRejected) as info:
        judge(server, ["z" * i for i in range(1, 7)], concurrency=2)
    assert "$JUDGE_KEY" in str(info.value) and KEY not in str(info.value)
    assert server.requests <= 2  # the rest are not sent once the key is rejected


def test_connection_failures_name_the_url_and_whether_to_try_again():
    url = "http://judge.example/v1"
    assert str(lj._connection_failure(url, socket.gaierror(-2, "Name or service not known"))) == \
        f"cannot reach the judge at {url} (unknown host)"
    assert isinstance(lj._connection_failure(url, ConnectionRefusedError()), lj.JudgeUnreachable)
    assert isinstance(lj._connection_failure(url, TimeoutError()), lj._Retriable)
    assert isinstance(lj._connection_failure(url, ConnectionResetError()), lj._Retriable)
    assert lj._scrub(f"bad   key {KEY}\n given", KEY) == "bad key *** given"  # a server echoing the key


def test_concurrency_is_bounded_at_the_server(server):
    server.reset("slow", delay=0.2)
    started = time.monotonic()
    assert judge(server, ["z" * i for i in range(1, 13)], concurrency=3) == pytest.approx([0.9] * 12)
    assert server.max_active == 3 and server.requests == 12
    assert time.monotonic() - started >= 4 * 0.2 * 0.9  # 12 requests, 3 at a time


def test_a_hanging_judge_costs_timeout_times_tries(server):
    server.reset("hang")
    started = time.monotonic()
    with pytest.raises(lj.JudgeError, match="did not answer in time; gave up after 2 tries"):
        judge(server, ["z" * i for i in range(1, 5)], timeout_s=0.3, retries=1, concurrency=4)
    assert time.monotonic() - started < 2.0  # 2 tries of 0.3 s, all four at once
    assert server.requests == 8


def test_cache_in_the_run_folder_answers_again_for_free(server, tmp_path):
    server.reset("score")
    set_run_folder(tmp_path)
    completions = ["zz", "ab", "z"]
    first = judge(server, completions)
    assert server.requests == 3
    rows = [json.loads(line) for line in (tmp_path / lj.CACHE_FILE).read_text().splitlines()]
    assert len(rows) == 3 and all(set(r) == {"key", "reply"} for r in rows)
    assert judge(server, completions) == first and server.requests == 3
    lj._JUDGES.clear()  # a new process (a resumed run) reads the file back
    with open(tmp_path / lj.CACHE_FILE, "a") as f:
        f.write('{"key": "torn')  # a run killed mid-write
    assert judge(server, completions + ["zzz"]) == pytest.approx(first + [0.9]) and server.requests == 4
    j = lj.judge_for(settings(server))
    assert j.pop_counts()["judge_cached"] == 3.0
    # another template or model is another question
    judge(server, completions, template="Again. " + TEMPLATE)
    assert server.requests == 7
    assert KEY not in (tmp_path / lj.CACHE_FILE).read_text()


def test_preflight_checks_key_variable_server_and_key(server, monkeypatch):
    server.reset("score")
    lj.llm_judge.preflight(settings(server))  # fine: nothing raised
    assert server.paths == ["/v1/models"] and server.requests == 0  # no judgement paid for
    server.reset("unauthorized")
    with pytest.raises(RunError) as info:
        lj.llm_judge.preflight(settings(server))
    assert info.value.exit_code == 2 and "$JUDGE_KEY" in str(info.value) and KEY not in str(info.value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # bound, never listening: refused
        with pytest.raises(RunError) as info:
            lj.llm_judge.preflight(settings(server, base_url=closed))
    assert info.value.exit_code == 4 and f"cannot reach the judge at {closed} (connection refused)" in str(info.value)
    monkeypatch.delenv("JUDGE_KEY")
    with pytest.raises(RunError, match="JUDGE_KEY .kwargs.api_key_env. is not set") as info:
        lj.llm_judge.preflight(settings(server))
    assert info.value.exit_code == 2
