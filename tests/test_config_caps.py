"""Hostile config files: size cap, alias-expansion cap, and at most 50 problems printed."""
import re
import time

from conftest import run_cli
from rlft.config.compose import MAX_CONFIG_BYTES

BOMB = """a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_alias_bomb_is_refused_quickly(tmp_path):
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text(BOMB)
    start = time.monotonic()
    res = run_cli("validate-config", "-c", cfg, timeout=60)
    assert time.monotonic() - start < 30
    assert res.returncode == 2, res.stderr[-2000:]
    assert "aliases" in res.stderr and "bomb.yaml" in res.stderr and "Traceback" not in res.stderr


def test_alias_bomb_on_the_command_line_is_refused(tmp_path):
    nested = "{" + ", ".join(f"k{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" if i else "k0: &a0 "
                                                                                               "[1,1,1,1,1,1,1,1,1,1]"
                             for i in range(9)) + "}"
    res = run_cli("validate-config", f"x.y={nested}", timeout=60)
    assert res.returncode == 2 and "aliases" in res.stderr and "Traceback" not in res.stderr


def test_recursive_alias_is_a_clear_error(tmp_path):
    cfg = tmp_path / "loop.yaml"
    cfg.write_text("train: &t\n  self: *t\n")
    res = run_cli("validate-config", "-c", cfg)
    assert res.returncode == 2 and "recursive alias" in res.stderr and "Traceback" not in res.stderr


def test_oversized_config_file_is_refused(tmp_path):
    cfg = tmp_path / "huge.yaml"
    cfg.write_text("".join(f"key_{i}: {i}\n" for i in range(MAX_CONFIG_BYTES // 10 + 10)))
    res = run_cli("validate-config", "-c", cfg)
    assert res.returncode == 2
    assert "huge.yaml" in res.stderr and "MB" in res.stderr
    assert len(res.stderr.splitlines()) <= 3


def test_at_most_50_problems_are_printed_with_a_count_of_the_rest(tmp_path):
    cfg = tmp_path / "many.yaml"
    cfg.write_text("train:\n" + "".join(f"  unknown_{i}: {i}\n" for i in range(120)))
    res = run_cli("validate-config", "-c", cfg)
    assert res.returncode == 2
    lines = res.stderr.splitlines()
    assert sum(line.startswith("error: train.unknown_") for line in lines) == 50
    assert re.search(r"^\.\.\. and \d+ more problems not shown \(70 errors, \d+ warnings?\)$", res.stderr, re.M)
    assert lines[-1] == "config invalid: 120 errors"


def test_pipeline_files_have_the_same_caps(tmp_path):
    bomb = tmp_path / "pipe.yaml"
    bomb.write_text("stages:\n  - stage: grpo\n" + "".join("    " + line + "\n" for line in BOMB.splitlines()))
    res = run_cli("pipeline", "validate", bomb, timeout=60)
    assert res.returncode == 2 and "aliases" in res.stderr and "Traceback" not in res.stderr
    big = tmp_path / "big.yaml"
    big.write_text("stages:\n  - stage: grpo\n" + "#" * (MAX_CONFIG_BYTES + 10) + "\n")
    res = run_cli("pipeline", "validate", big)
    assert res.returncode == 2 and "MB" in res.stderr and "Traceback" not in res.stderr
