"""Config files are parsed with libyaml when PyYAML has it (faster) and with PyYAML's Python parser
otherwise, for errors, and for documents that may nest deeper than libyaml's C recursion survives:
the values, key lines and error messages must not depend on which one ran."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from rlft.config.compose import (C_PARSER_MAX_DEPTH, _CLoader, _compose_with, _key_lines, _Loader, _may_nest_deeper,
                                 configs_dir, read_yaml_file)
from rlft.config.errors import ConfigError

pytestmark = pytest.mark.skipif(_CLoader is None, reason="PyYAML built without libyaml")
REPO = configs_dir().parent
SHIPPED = sorted(configs_dir().rglob("*.yaml"))

SNIPPETS = [
    "a: 1e-6\nb: 1.0e-6\nc: .5\nd: -1E+3\ne: 1_000\nf: 0x1F\ng: .inf\nh: .NaN\ni: 017\n",
    "a: yes\nb: no\nc: on\nd: off\ne: ~\nf: null\ng: 2026-01-02\nh: '1e-6'\n",
    "base: &b {x: 1, y: [1, 2]}\nuse: *b\nmerge:\n  <<: *b\n  z: 3\n",
    "text: |\n  line one\n  line two\nfolded: >-\n  a\n  b\nq: \"tab\\there \\u00e9\"\n",
    "- a\n- - b\n  - c\n- {k: v, l: [1, {m: n}]}\n",
    "rewards:\n  - fn: regex_match\n    kwargs: {pattern: '^\\d+$', template: 'Answer: ${answer}'}\n",
    "key: value # comment\n# only comment\n'quoted key': 1\n? complex\n: 2\n",
    "",
    "# nothing but a comment\n",
]
BROKEN = [
    "a: b: c\n",
    "a:\n  - 1\n  b: 2\n",
    "a: [1, 2\n",
    "a: 'unterminated\n",
    "a:\n\tb: 1\n",
    "a: *missing\n",
    "a: \x07\n",
    "--- 1\n--- 2\n",
]


def _parse(cls, text: str):
    node, data = _compose_with(cls, text, "f.yaml")
    lines: dict[str, int] = {}
    if node is not None:
        _key_lines(node, "", lines, [])
    return data, lines


def _outcome(cls, text: str):
    try:
        return ("ok", *_parse(cls, text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return ("yaml error", type(exc).__name__, mark.line if mark else None)
    except ConfigError as exc:
        return ("config error", [str(p) for p in exc.problems])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(configs_dir())))
def test_shipped_files_parse_the_same_with_both_parsers(path):
    text = path.read_text(encoding="utf-8")
    assert _parse(_CLoader, text) == _parse(_Loader, text)


@pytest.mark.parametrize("text", SNIPPETS)
def test_values_and_lines_are_the_same(text):
    assert _outcome(_CLoader, text) == _outcome(_Loader, text)


@pytest.mark.parametrize("text", BROKEN)
def test_broken_yaml_gets_the_python_parsers_message(tmp_path, text):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as got:
        read_yaml_file(bad, "bad.yaml")
    with pytest.raises(yaml.YAMLError) as python:
        _compose_with(_Loader, text, "bad.yaml")
    mark = getattr(python.value, "problem_mark", None)
    where = f"bad.yaml:{mark.line + 1}" if mark else "bad.yaml"
    reason = getattr(python.value, "problem", None) or str(python.value).splitlines()[0]
    assert [str(p) for p in got.value.problems] == [f"error: (yaml) ({where}): YAML syntax error: {reason}"]


def test_alias_caps_are_the_same():
    bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    recursive = "a: &x\n  b: *x\n"
    for text in (bomb, recursive):
        assert _outcome(_CLoader, text) == _outcome(_Loader, text)
        assert _outcome(_Loader, text)[0] == "config error"


def test_nesting_bound():
    assert not _may_nest_deeper("a:\n  b: [1, {c: 2}]\n", C_PARSER_MAX_DEPTH)
    assert _may_nest_deeper("a: " + "[" * C_PARSER_MAX_DEPTH + "]" * C_PARSER_MAX_DEPTH, C_PARSER_MAX_DEPTH)
    block = "".join(" " * i + f"k{i}:\n" for i in range(C_PARSER_MAX_DEPTH // 2))
    assert _may_nest_deeper(block, C_PARSER_MAX_DEPTH)


def test_a_very_deep_document_is_a_clear_error_not_a_crash(tmp_path):
    deep = tmp_path / "deep.yaml"
    depth = 200_000  # far past where libyaml's recursive composer crashes the interpreter
    deep.write_text("train: " + "[" * depth + "]" * depth + "\n", encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "rlft.cli", "validate-config", "-c", str(deep)],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "deep.yaml" in res.stderr and "Traceback" not in res.stderr
