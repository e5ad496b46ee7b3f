"""The structure rules of docs/architecture.md ("Rules the tests enforce"), checked on rlft's source with `ast` (no
import of rlft, no torch). The checkers live in scripts/structure_metrics.py, which also prints the counts.

Each rule is compared with an exact list of today's known violations: a new violation fails, and so does a listed
one that no longer occurs (delete its entry), so the lists only shrink. Each checker is shown to fail on a small
planted package."""

from __future__ import annotations

import functools
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_checkers():
    spec = importlib.util.spec_from_file_location("structure_metrics", ROOT / "scripts" / "structure_metrics.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


S = _load_checkers()

# rule id (S.RULES) -> {violation key: why it is there / what removes it}
KNOWN_VIOLATIONS: dict[str, dict[str, str]] = {
    "upward-imports": {},
    "unplaced-modules": {},
    "stage-rules": {
        "rlft/stages/awr/spec.py -> rlft.config.render": "a spec's checks render values: config.render is not listed",
        "rlft/stages/rs_sft/spec.py -> rlft.config.render": "as awr's",
        "rlft/stages/dpo/spec.py -> rlft.config.preference_lengths": "the preference length checks, shared by specs",
        "rlft/stages/orpo/spec.py -> rlft.config.preference_lengths": "as dpo's",
        "rlft/stages/grpo/spec.py -> rlft.rewards.registry": "GRPO's file checks resolve rewards (lazy import)",
        "rlft/stages/grpo/spec.py -> rlft.data.peek": "GRPO's file checks read the data (lazy import)",
        "rlft/stages/grpo/spec.py -> rlft.data.demo": "GRPO's file checks know the demo data (lazy import)",
    },
    "class-size": {
        "rlft/trainers/grpo.py:RlftGRPOTrainer": "3 mixins over TRL's GRPOTrainer; under 250 only without them",
        "rlft/trainers/grpo_async.py:AsyncGRPOTrainer": "RlftGRPOTrainer's MRO plus the async learner",
    },
    "function-size": {},
    "duplicate-names": {
        # same job, two bodies: to merge into one
        # same name, different jobs: to rename one of them
        "as_text: rlft/data/messages.py, rlft/plan/render.py": "different jobs",
        "describe: rlft/config/eval_sampling.py, rlft/config/keys.py, rlft/config/metric_docs.py, rlft/data/chat.py, "
        "rlft/runtime/sharding.py": "five describers of five things",
        "evaluate: rlft/posttrain/evaluate.py, rlft/rollout/evaluate.py": "`rlft eval` and the run's eval",
        "generate: rlft/docs/generate.py, rlft/posttrain/generate.py": "reference pages and `rlft generate`",
        "load: rlft/commands/common.py, rlft/rewards/reward_model.py": "a config and a reward model",
        "quiet: rlft/commands/common.py, rlft/progress.py": "an option and a progress flag",
        "read_marker: rlft/models/tiny_family.py, rlft/rundir/markers.py": "two different markers",
        "reference: rlft/models/loading.py, rlft/plan/terms.py": "a model and a memory term",
        "report: rlft/commands/report.py, rlft/plan/render.py": "a verb and a plan's text",
        "required_columns: rlft/rewards/columns.py, rlft/rewards/llm_judge.py": "the reader and one declaration",
        "reward_model: rlft/plan/terms.py, rlft/rewards/reward_model.py": "a memory term and a reward",
        "sampler_copy: rlft/plan/terms.py, rlft/rollout/offpolicy.py": "a memory term and the copy itself",
        "tiny_config: rlft/models/tiny_family.py, rlft/plan/model_shape.py": "a model config and its shape",
    },
    "string-loads": {},
}


@functools.cache
def _rlft():
    return S.load_modules(), S.layer_table()


@pytest.mark.parametrize("rule", sorted(S.RULES))
def test_rule_holds_on_rlft_apart_from_its_known_violations(rule):
    label, check = S.RULES[rule]
    modules, rows = _rlft()
    found = {v.key: v for v in check(modules, rows)}
    known = KNOWN_VIOLATIONS[rule]
    new = [str(found[k]) for k in sorted(set(found) - set(known))]
    gone = sorted(set(known) - set(found))
    assert not new, f"{label}: new violations (fix them; docs/architecture.md says why):\n  " + "\n  ".join(new)
    assert not gone, (f"{label}: fixed, so delete their entries from KNOWN_VIOLATIONS['{rule}'] in "
                      f"tests/test_structure.py:\n  " + "\n  ".join(gone))


def test_every_rule_has_a_known_violations_list():
    assert set(KNOWN_VIOLATIONS) == set(S.RULES)


def test_the_layer_table_is_read_from_docs_architecture():
    rows = _rlft()[1]
    row = {entry: i for i, r in enumerate(rows) for entry in r}
    assert row["cli"] < row["commands/"] < row["stages/<name>/runner.py"] < row["trainers/"] < row["rollout/"]
    assert row["trainers/"] == row["launch/"] and row["rundir/"] == row["models/"]
    assert row["runtime/"] < row["monitor/"] < row["rundir/"] < row["config/"] == row["stages/<name>/spec.py"]
    assert row["config/"] < row["errors.py"] == row["tiny.py"]
    assert S.layer_of("rlft.stages.grpo.spec", rows) == row["config/"]
    assert S.layer_of("rlft.stages.common.prompt_data", rows) == row["stages/<name>/runner.py"]
    assert S.layer_of("rlft.monitor.report.load", rows) == row["monitor/"]


def test_the_import_parser_sees_lazy_and_relative_imports():
    modules = _rlft()[0]
    edges = {(i.src, i.dst) for i in S.imports(modules)}
    assert ("rlft.models.loading", "rlft.models.weights") in edges
    assert ("rlft.commands.train", "rlft.launch.dry_run") in edges  # inside the verb's function


# --- each checker fails on a planted violation ----------------------------------------------------------------------

PLANTED_LAYERS = """# planted

## Layers
```
stages/<name>/runner.py              recipes
trainers/                            trainers
runtime/                             lifecycle
config/,                             bottom
stages/<name>/spec.py
errors.py                            any layer
```
"""


def _plant(tmp_path: Path, files: dict[str, str]):
    for rel, text in {"rlft/__init__.py": "", **files}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(tmp_path).parents:
            if str(parent) != "." and not (tmp_path / parent / "__init__.py").exists():
                (tmp_path / parent / "__init__.py").write_text("")
        path.write_text(textwrap.dedent(text))
    (tmp_path / "architecture.md").write_text(PLANTED_LAYERS)
    return S.load_modules(tmp_path), S.layer_table(tmp_path / "architecture.md")


def _keys(violations) -> set[str]:
    return {v.key for v in violations}


def test_planted_layer_table_is_parsed(tmp_path):
    _, rows = _plant(tmp_path, {})
    assert rows == [["stages/<name>/runner.py"], ["trainers/"], ["runtime/"], ["config/", "stages/<name>/spec.py"],
                    ["errors.py"]]


def test_an_upward_import_is_found_lazy_or_not(tmp_path):
    modules, rows = _plant(tmp_path, {
        "rlft/trainers/t.py": "from rlft.runtime import ctx\n",  # down: fine
        "rlft/runtime/ctx.py": "def f():\n    from rlft.trainers.t import x\n",  # up, inside a function
        "rlft/config/fields.py": "import rlft.trainers.t\nfrom rlft import errors\n",  # up; errors: down
        "rlft/errors.py": "",
        "rlft/lost.py": "",
    })
    assert _keys(S.upward_imports(modules, rows)) == {"rlft/runtime/ctx.py -> rlft.trainers.t",
                                                      "rlft/config/fields.py -> rlft.trainers.t"}
    assert _keys(S.unplaced_modules(modules, rows)) == {"rlft/lost.py"}


def test_stage_folder_rules_are_found(tmp_path):
    modules, _ = _plant(tmp_path, {
        "rlft/config/fields.py": "", "rlft/config/render.py": "", "rlft/errors.py": "",
        "rlft/stages/loop.py": "",
        "rlft/stages/a/layout.py": "",
        "rlft/stages/a/spec.py": "from rlft.config import fields\nfrom rlft.errors import E\nfrom . import layout\n"
                                 "def f():\n    from rlft.config import render\n",
        "rlft/stages/a/runner.py": "from rlft.stages.b.runner import run\nfrom rlft.stages.common import c\n"
                                   "from rlft.stages import loop\n",
        "rlft/stages/b/runner.py": "from .spec import SPEC\n",
        "rlft/stages/b/spec.py": "from rlft.stages.b import runner\n",
        "rlft/stages/common/c.py": "from rlft.stages.loop import x\n",
    })
    assert _keys(S.stage_rules(modules)) == {
        "rlft/stages/a/runner.py -> rlft.stages.b.runner",   # a stage folder importing another
        "rlft/stages/a/spec.py -> rlft.config.render",        # a spec beyond config.fields/stagespec/names
        "rlft/stages/b/spec.py -> rlft.stages.b.runner",      # a spec importing its runner
        "rlft/stages/common/c.py -> rlft.stages.loop",       # common/ importing the stages root
    }


def _body(n: int, indent: str = "    ") -> str:
    return "".join(f"{indent}x{i} = {i}\n" for i in range(n))


def test_a_class_over_the_limit_through_its_mixin_is_found(tmp_path):
    mixin = "class Mixin:\n" + _body(199)                                   # 200 lines
    modules, _ = _plant(tmp_path, {
        "rlft/trainers/mixins.py": mixin,
        "rlft/trainers/big.py": "from rlft.trainers.mixins import Mixin\n\n"
                                "class Big(Mixin, object):\n" + _body(50),  # 51 + 200 = 251
        "rlft/trainers/ok.py": "from rlft.trainers import mixins\nfrom rlft.trainers.mixins import Mixin as M\n\n"
                               "class Ok(M):\n" + _body(49),                # 50 + 200 = 250
    })
    assert S.class_sizes(modules)["rlft.trainers.big.Big"] == 251
    assert _keys(S.big_classes(modules)) == {"rlft/trainers/big.py:Big"}


def test_a_function_over_the_limit_is_found(tmp_path):
    modules, _ = _plant(tmp_path, {
        "rlft/runtime/f.py": "def long():\n" + _body(80) + "\ndef ok():\n" + _body(79)
                             + "\nclass C:\n    def method(self):\n" + _body(80, "        "),
    })
    assert _keys(S.big_functions(modules)) == {"rlft/runtime/f.py:long", "rlft/runtime/f.py:C.method"}


def test_a_public_name_defined_twice_is_found(tmp_path):
    modules, _ = _plant(tmp_path, {
        "rlft/runtime/a.py": "def helper():\n    pass\ndef _private():\n    pass\ndef run():\n    pass\n",
        "rlft/config/b.py": "class helper:\n    pass\ndef _private():\n    pass\ndef run():\n    pass\n",
    })
    assert _keys(S.duplicate_names(modules)) == {"helper: rlft/config/b.py, rlft/runtime/a.py"}


def test_a_class_loaded_by_a_string_is_found(tmp_path):
    modules, _ = _plant(tmp_path, {
        "rlft/trainers/t.py": "import importlib\n\ndef f():\n    return importlib.import_module('rlft.trainers.x')\n",
        "rlft/runtime/r.py": "TRAINER = 'rlft.trainers.t:Trainer'\n\ndef f():\n    \"\"\"Not 'rlft.a:B'.\"\"\"\n",
        "rlft/config/stages.py": "import importlib\nimportlib.import_module('rlft.stages.a.spec')\n",  # a loader
        "rlft/stages/a/spec.py": "SPEC = dict(runner='rlft.stages.a.runner:run')\n",  # a spec's runner
    })
    assert _keys(S.string_loads(modules)) == {"rlft/trainers/t.py: import_module(...)",
                                              "rlft/runtime/r.py: \"rlft.trainers.t:Trainer\""}


def test_the_metrics_script_counts_the_redesign_targets():
    counts = dict(S.counts(*_rlft()))
    assert counts["periodic-eval owners"] >= 1 and counts["Stage parts (overridable)"] >= 4
    assert all(n >= 1 for n in counts["registrations per advantage estimator"].values())
