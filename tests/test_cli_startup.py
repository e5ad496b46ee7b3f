"""Start-up lightness: the config commands never import the heavy ML stack. Each check runs a fresh
interpreter, since the test process itself may already have imported torch."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from rlft.config import configs_dir

REPO = configs_dir().parent
HEAVY = {"torch", "transformers", "trl", "peft", "datasets", "accelerate"}
# not heavy, but 0.1 s of a 0.3 s command: typer 0.29+ imports it to coerce options unless rlft's
# coercion of string and path options (rlft/cli_coerce.py) is in place
SLOW = {"pydantic", "pydantic_core"}
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|(?P<name>\s*\S+)\s*$")


def imported_modules(stderr: str) -> set[str]:
    """Module names from `python -X importtime` output."""
    names = set()
    for line in stderr.splitlines():
        m = IMPORT_LINE.match(line)
        if m:
            names.add(m["name"].strip())
    return names


@pytest.mark.parametrize("args", [
    ["--help"],
    ["validate-config", "--stage", "grpo", "--hw", "a100"],
    ["validate-config", "--stage", "dpo", "--hw", "a100", "-c", "configs/examples/production.yaml"],
    ["show-config", "--explain"],
    ["validate-config", "--hw", "auto", "-c", "configs/examples/grpo_demo.yaml"],
    ["validate-config", "--stage", "grpo", "-c", "configs/examples/grpo_judge.yaml"],  # the llm_judge kwargs check
    ["show-config", "--hw", "auto"],
    ["list"],
    ["keys", "grpo.kl"],
    ["pipeline", "validate", "configs/examples/pipeline_demo.yaml"],
    ["pipeline", "show", "configs/examples/pipeline_demo.yaml"],
    ["plan", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/grpo_demo.yaml"],
    ["plan", "--stage", "ppo", "--hw", "a100", "--json"],
])
def test_config_commands_import_no_heavy_library(args):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "rlft.cli", *args],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = imported_modules(proc.stderr)
    assert "rlft.cli" in modules or "rlft.config" in modules  # the parser saw real import lines
    heavy = sorted(m for m in modules if m.partition(".")[0] in HEAVY)
    assert not heavy, f"`rlft {' '.join(args)}` imported {heavy[:10]}"
    slow = sorted(m for m in modules if m.partition(".")[0] in SLOW)
    assert not slow, f"`rlft {' '.join(args)}` imported {slow[:5]}: see rlft/cli_coerce.py"


def test_importing_the_cli_loads_no_heavy_library():
    code = "import sys, rlft.cli; print(' '.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    loaded = {name.partition(".")[0] for name in proc.stdout.split()}
    assert "rlft" in loaded
    assert not loaded & HEAVY, sorted(loaded & HEAVY)


def test_imported_modules_parser():
    sample = ("import time: self [us] | cumulative | imported package\n"
              "import time:       120 |        120 |   torch._C\n"
              "import time:      9000 |      20000 | transformers\n")
    assert imported_modules(sample) == {"torch._C", "transformers"}


def test_help_reads_no_yaml_and_builds_no_schema():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "rlft.cli", "--help"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = imported_modules(proc.stderr)
    assert "rlft.config.stages" in modules
    assert not modules & {"yaml", "rlft.config.schema", "rlft.config.compose", "rlft.config.validate"}


def test_lazy_package_names_resolve_to_the_same_objects():
    # rlft.config and rlft.rewards load their names on first use; `compose` and `validate` must stay the
    # functions even once their modules of the same name are imported
    code = ("import rlft.config.compose, rlft.config.validate, rlft.config as c, rlft.rewards as r\n"
            "from rlft.config import compose, validate\n"
            "assert compose is sys.modules['rlft.config.compose'].compose and c.compose is compose\n"
            "assert validate is sys.modules['rlft.config.validate'].validate and c.validate is validate\n"
            "assert all(getattr(c, n) is not None for n in c.__all__)\n"
            "assert all(getattr(r, n) is not None for n in r.__all__)\n"
            "from rlft.rewards import registry, SafeReward\n"
            "assert SafeReward is sys.modules['rlft.rewards.safe'].SafeReward and registry.__name__ == "
            "'rlft.rewards.registry'\n")
    proc = subprocess.run([sys.executable, "-c", "import sys\n" + code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("argv", [
    ["validate-config", "--help"], ["show-config", "--help"], ["plan", "--help"], ["keys", "--help"],
    ["list", "--help"], ["train", "--help"], ["eval", "--help"], ["validate-config", "--bogus"],
    ["keys", "a", "b"], ["validate-config", "--stage", "nope"],
])
def test_the_one_verb_app_prints_what_the_whole_app_prints(argv):
    # main() builds only the verb it runs (rlft.cli.app_for): the same text and exit code as the whole app
    from typer.testing import CliRunner

    from rlft.cli import app, app_for

    one = app_for(argv)
    assert one is not app
    whole, single = CliRunner().invoke(app, argv), CliRunner().invoke(one, argv)
    assert (single.exit_code, single.output) == (whole.exit_code, whole.output)


@pytest.mark.parametrize("argv", [[], ["--help"], ["--version"], ["pipeline", "show", "x.yaml"], ["nope"]])
def test_anything_but_a_verb_runs_the_whole_app(argv):
    from rlft.cli import app, app_for

    assert app_for(argv) is app


def test_the_schema_reads_its_annotations_as_get_type_hints_does():
    import dataclasses
    import typing

    from rlft.config.schema import RewardConfig, RlftConfig, _unwrap, type_hints

    seen = set()

    def walk(cls):
        if cls in seen:
            return
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        assert type_hints(cls) == hints and list(type_hints(cls)) == list(hints), cls
        for f in dataclasses.fields(cls):
            for tp in _unwrap(hints[f.name])[::2]:
                if dataclasses.is_dataclass(tp):
                    walk(tp)

    walk(RlftConfig)
    walk(RewardConfig)
    assert len(seen) > 15  # every section, the stages' own and their sub-sections


def test_validate_config_reads_the_data_for_memory_only_when_the_limits_do_not_fit():
    # the data's plan never exceeds the limits' plan: it (the tokenizer, jinja2's template) is only needed to
    # decide a warning the limits' plan would give
    args = ["validate-config", "--stage", "grpo", "--hw", "cpu", "-c", "configs/examples/grpo_demo.yaml"]
    for extra, read in (([], False), (["hw.device_memory_gb=0.3"], True)):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "rlft.cli", *args, *extra],
                              capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 0, proc.stderr[-2000:]
        loaded = {m.partition(".")[0] for m in imported_modules(proc.stderr)}
        assert ("jinja2" in loaded) is read and ("hw.device_memory_gb" in proc.stderr) is read, extra
