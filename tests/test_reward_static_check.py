"""validate-config checks reward files and modules by reading their source, never by running them;
relative reward names resolve against the config file that named them."""
import sys

from conftest import run_cli
from rlft.rewards import build_reward_suite
from rlft.rewards.registry import check_reward_spec

SIDE_EFFECT = "import pathlib, sys\npathlib.Path({marker!r}).write_text('ran')\nsys.exit(3)\n"


def test_check_reads_source_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "r.py").write_text(SIDE_EFFECT.format(marker=str(marker)) + "def score(p, c, **k):\n    return [1.0]\n")
    assert check_reward_spec(f"{tmp_path / 'r.py'}:score") is None
    msg = check_reward_spec(f"{tmp_path / 'r.py'}:scor")
    assert "has no function 'scor'" in msg and "Did you mean 'score'?" in msg
    assert not marker.exists()


def test_check_understands_module_level_bindings(tmp_path):
    (tmp_path / "m.py").write_text(
        "from functools import partial as make\nimport json\ntry:\n    def a(p, c): pass\nexcept ImportError:\n"
        "    a = None\nif True:\n    b = make(len)\nclass C:\n    def m(self): pass\nVALUE = 3\nNAMES = ['x']\n"
        "async def d(p, c): pass\n")
    f = tmp_path / "m.py"
    for name in ("a", "b", "C.m", "d", "make", "json"):
        assert check_reward_spec(f"{f}:{name}") is None, name
    assert "not callable (it is a int)" in check_reward_spec(f"{f}:VALUE")
    assert "not callable" in check_reward_spec(f"{f}:NAMES")
    (tmp_path / "star.py").write_text("from os.path import *\n")
    assert check_reward_spec(f"{tmp_path / 'star.py'}:join") is None  # cannot tell: left to train time
    (tmp_path / "bad.py").write_text("def f(:\n")
    assert "syntax error" in check_reward_spec(f"{tmp_path / 'bad.py'}:f") \
            and "line 1" in check_reward_spec(f"{tmp_path / 'bad.py'}:f")


def test_module_check_imports_no_package_code(tmp_path):
    marker = tmp_path / "ran"
    pkg = tmp_path / "rlft_static_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(SIDE_EFFECT.format(marker=str(marker)))
    (pkg / "rw.py").write_text(SIDE_EFFECT.format(marker=str(marker)) + "def score(p, c): pass\n")
    assert check_reward_spec("rlft_static_pkg.rw:score", base_dir=tmp_path) is None
    assert "has no function 'nope'" in check_reward_spec("rlft_static_pkg.rw:nope", base_dir=tmp_path)
    assert "no module named 'rlft_static_pkg.missing'" in check_reward_spec("rlft_static_pkg.missing:f",
                                                                            base_dir=tmp_path)
    assert not marker.exists() and "rlft_static_pkg" not in sys.modules
    assert check_reward_spec("rlft.rewards.builtin:char_fraction") is None
    assert "has no function" in check_reward_spec("rlft.rewards.builtin:nope")


def test_validate_config_never_runs_reward_code(tmp_path):
    marker = tmp_path / "ran"
    up = tmp_path / "up"
    (up / "a" / "b").mkdir(parents=True)
    (tmp_path / "evil.py").write_text(SIDE_EFFECT.format(marker=str(marker)) + "def score(p, c, **k): pass\n")
    cfg = up / "a" / "b" / "c.yaml"
    cfg.write_text("data:\n  train: demo\nrewards:\n  - fn: ../../../evil.py:score\n")
    res = run_cli("validate-config", "--stage", "grpo", "-c", cfg)
    assert res.returncode == 0, res.stderr
    assert not marker.exists()
    cfg.write_text("data:\n  train: demo\nrewards:\n  - fn: ../../../evil.py:scroe\n")
    res = run_cli("validate-config", "--stage", "grpo", "-c", cfg)
    assert res.returncode == 2 and "has no function 'scroe'" in res.stderr and "Did you mean 'score'?" in res.stderr
    assert "Traceback" not in res.stderr and not marker.exists()


def test_reward_names_resolve_next_to_the_config_not_the_working_directory(tmp_path):
    conf, work = tmp_path / "conf", tmp_path / "work"
    conf.mkdir(), work.mkdir()
    good = "def score(p, c, **k):\n    return [1.0] * len(c)\n"
    (conf / "rw.py").write_text(good)
    (conf / "rlft_cfgdir_rewards.py").write_text(good)
    for name in ("rw.py", "rlft_cfgdir_rewards.py"):  # same names in the working directory: must not be used
        (work / name).write_text("def other(p, c, **k):\n    return [0.0] * len(c)\n")
    cfg = conf / "c.yaml"
    cfg.write_text("data:\n  train: demo\nrewards:\n  - fn: rw.py:score\n  - fn: rlft_cfgdir_rewards:score\n")
    res = run_cli("validate-config", "--stage", "grpo", "-c", cfg, cwd=work)
    assert res.returncode == 0, res.stderr


def test_training_resolves_module_rewards_in_the_config_folder_first(tmp_path, monkeypatch):
    conf, work = tmp_path / "conf", tmp_path / "work"
    conf.mkdir(), work.mkdir()
    (conf / "rlft_cfgdir_rewards2.py").write_text("def score(p, c, **k):\n    return [1.0] * len(c)\n")
    (work / "rlft_cfgdir_rewards2.py").write_text("def score(p, c, **k):\n    return [0.0] * len(c)\n")
    monkeypatch.chdir(work)
    suite = build_reward_suite([{"fn": "rlft_cfgdir_rewards2:score"}], config_dir=conf)
    assert suite.score([""], ["x"]).total == [1.0]
    sys.modules.pop("rlft_cfgdir_rewards2", None)
