"""Property tests: random mutations of the shipped example configs, random damaged data files and random
damaged run folders thrown at `validate-config` and `report`. Whatever comes in, rlft answers with an exit
code it documents (0 or 2 here), never a traceback, and changes nothing outside the folder it writes."""

import json
import random
import string
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import ROOT
from rlft.cli import app
from test_report import make_grpo_run

EXAMPLES = sorted(p for p in (ROOT / "configs" / "examples").glob("*.yaml") if not p.name.startswith("pipeline"))
STAGE_OF = {"grpo_demo": "grpo", "ppo_demo": "ppo", "dpo_demo": "dpo", "orpo_demo": "orpo", "rs_sft_demo": "rs_sft",
            "awr_demo": "awr", "tool_use_grpo": "grpo", "tool_use_ppo": "ppo"}
PROFILE = settings(max_examples=60, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
runner = CliRunner()

# values a hostile or careless user writes: wrong types, huge and tiny numbers, NaN, paths, resolvers, control chars
hostile_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**18, max_value=10**18),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e12, -1, 0, 0.0, 1e-300, 2**63]),
    st.text(max_size=20), st.sampled_from(["../../etc", "/", "${oc.env:HOME}", "${nope.key}", "${oc.decode:'1'}",
                                           "\x00", "tiny", "auto", "a:b", "pkg.mod:fn", "grpo", "💥", "null", "~"]),
)
hostile_values = st.recursive(hostile_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(string.ascii_lowercase + "_.", max_size=8), inner,
                                                 max_size=3)),
    max_leaves=6)


def _leaves(data, prefix=()):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _leaves(v, prefix + (i,))
    yield prefix


def _set(data, path, value):
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def _delete(data, path):
    for part in path[:-1]:
        data = data[part]
    del data[path[-1]]


@st.composite
def mutated_configs(draw):
    """(stage, YAML text): an example config with a few random keys changed, deleted or added."""
    path = draw(st.sampled_from(EXAMPLES))
    data = yaml.safe_load(path.read_text())
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _leaves(data) if p]
        kind = draw(st.sampled_from(["set", "set", "delete", "add"]))
        target = rng.choice(paths) if paths else ("train",)
        try:
            if kind == "set":
                _set(data, target, draw(hostile_values))
            elif kind == "delete":
                _delete(data, target)
            else:
                section = rng.choice(["train", "grpo", "ppo", "data", "model", "lora", "hw", "monitor", "zzz"])
                node = data.setdefault(section, {})
                if isinstance(node, dict):
                    node[draw(st.text(string.ascii_lowercase + "_", min_size=1, max_size=12))] = draw(hostile_values)
        except (KeyError, IndexError, TypeError):
            pass
    stage = STAGE_OF.get(path.stem, draw(st.sampled_from(["grpo", "ppo", "dpo", "orpo", "rs_sft", "awr"])))
    return stage, path, yaml.safe_dump(data, allow_unicode=True)


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _no_crash(res, allowed=(0, 2)):
    out = (res.stdout or "") + (res.stderr or "" if res.stderr_bytes is not None else "")
    assert res.exception is None or isinstance(res.exception, SystemExit), \
        f"crashed: {type(res.exception).__name__}: {res.exception}"
    assert res.exit_code in allowed, out[-2000:]
    assert "Traceback" not in out, out[-2000:]


@PROFILE
@given(case=mutated_configs())
def test_validate_config_on_mutated_examples(tmp_path_factory, case):
    stage, source, text = case
    folder = tmp_path_factory.mktemp("cfg")
    cfg = folder / source.name
    cfg.write_text(text)
    # relative paths in the examples (data, reward files) resolve against the examples folder
    for item in (source.parent / "data", source.parent / "rewards"):
        if item.exists() and not (folder / item.name).exists():
            (folder / item.name).symlink_to(item)
    before = _snapshot(ROOT / "configs")
    res = runner.invoke(app, ["validate-config", "--stage", stage, "-c", str(cfg)])
    _no_crash(res)
    assert _snapshot(ROOT / "configs") == before


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


@st.composite
def damaged_jsonl(draw):
    """Bytes of a prompts file: mostly good rows, then random damage."""
    rows = [{"prompt": f"Repeat the letter {c}:", "answer": c} for c in "abcdefgh"[:draw(st.integers(0, 8))]]
    lines = [json.dumps(r).encode() for r in rows]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["value", "truncate", "bytes", "deep", "dupkey", "blank", "huge_key"]))
        if kind == "value":
            lines.append(json.dumps(draw(json_values)).encode())
        elif kind == "truncate" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines[i] = lines[i][:draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif kind == "bytes":
            lines.append(draw(st.binary(min_size=1, max_size=40)).replace(b"\n", b""))
        elif kind == "deep":
            depth = draw(st.integers(100, 20000))
            lines.append(b'{"prompt": ' + b"[" * depth + b"]" * depth + b"}")
        elif kind == "dupkey":
            lines.append(b'{"prompt": "a", "prompt": "b"}')
        elif kind == "blank":
            lines.append(b"   ")
        else:
            lines.append(json.dumps({"prompt": "x", "k" * 5000: 1}).encode())
    return b"\n".join(lines) + b"\n"


@PROFILE
@given(data=damaged_jsonl())
def test_validate_config_on_damaged_data(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("data")
    path = folder / "prompts.jsonl"
    path.write_bytes(data)
    res = runner.invoke(app, ["validate-config", "--stage", "grpo", "-c", str(ROOT / "configs/examples/grpo_demo.yaml"),
                              f"data.train={path}"])
    _no_crash(res)
    assert path.read_bytes() == data


RUN_FILES = ["metrics.jsonl", "completions.jsonl", "health.jsonl", "reward_logs.jsonl", "summary.json", "config.yaml"]


@st.composite
def run_damage(draw):
    """[(file, how, payload)]: what to do to a finished run's files."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        out.append((draw(st.sampled_from(RUN_FILES)), draw(st.sampled_from(["replace_row", "truncate", "garbage",
                                                                           "delete", "json_value"])),
                    draw(json_values), draw(st.integers(0, 2**31))))
    return out


def _damage(root: Path, damage) -> None:
    for name, how, value, seed in damage:
        path, rng = root / name, random.Random(seed)
        if not path.exists():
            continue
        raw = path.read_bytes()
        if how == "delete":
            path.unlink()
        elif how == "truncate":
            path.write_bytes(raw[:rng.randrange(len(raw) + 1)])
        elif how == "garbage":
            path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))))
        elif how == "json_value":
            path.write_text(json.dumps(value))
        else:  # one row of a jsonl file replaced by any JSON value, or a field of a row by one
            lines = raw.decode("utf-8", "replace").splitlines()
            if not lines:
                continue
            i = rng.randrange(len(lines))
            try:
                row = json.loads(lines[i])
            except ValueError:
                row = None
            if isinstance(row, dict) and row and rng.random() < 0.7:
                row[rng.choice(sorted(row))] = value
                lines[i] = json.dumps(row)
            else:
                lines[i] = json.dumps(value)
            path.write_text("\n".join(lines) + "\n")


@settings(PROFILE, max_examples=20)
@given(damage=run_damage())
def test_report_on_damaged_run_folders(tmp_path_factory, damage):
    root = make_grpo_run(tmp_path_factory.mktemp("runs") / "run", steps=6)
    _damage(root, damage)
    before = _snapshot(root)
    res = runner.invoke(app, ["report", str(root)])
    _no_crash(res)
    after = {k: v for k, v in _snapshot(root).items() if not k.startswith("report/")}
    assert after == before  # the report reads the run, it never changes it
