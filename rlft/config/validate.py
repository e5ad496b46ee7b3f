"""Validate a composed config against the schema: every problem at once, each naming its key,
the layer that set it and what is allowed. Imports nothing heavy (no torch/transformers/TRL)."""

from __future__ import annotations

import difflib
import math
import os
import platform
import re
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

from rlft.numeric import is_number
from rlft.config.compose import Composed
from rlft.config.errors import ConfigError, Problem
from rlft.config.lr import resolve_learning_rate
from rlft.config.preference_lengths import check_prompt_length
from rlft.config.schema import (SLURM_TIME, FieldSpec, RewardConfig, RlftConfig, _unwrap, from_dict, leaf_specs,
                                section_fields)
from rlft.config.stages import SPECS as STAGE_SPECS
from rlft.config.stages import STAGE_SECTIONS, stage_sections
from rlft.config.stagespec import StageChecks

SPECS = leaf_specs()
REWARD_SPECS = leaf_specs(RewardConfig)
FREEFORM = {p for p, s in SPECS.items() if s.type is dict}  # `trl`: checked separately
# Names `apply_chat_template` and the template renderer pass themselves (transformers' parameters, and the
# `messages` every template reads): data.chat_template_kwargs under one of them would be passed twice (a
# TypeError at the first prompt) or silently change how every prompt is rendered (`tokenize`, `add_generation_prompt`).
# tests/test_config_hostile_values.py checks the list against the installed transformers.
RESERVED_TEMPLATE_KWARGS = (
    "messages", "conversation", "conversations", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "sanitize_control_tokens", "padding", "truncation", "max_length",
    "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
)


def closest_key(bad: str) -> str | None:
    """The valid key a typo most likely meant: same leaf name in another section, else fuzzy."""
    leaf = bad.rpartition(".")[2]
    same_leaf = [p for p in SPECS if p.rpartition(".")[2] == leaf]
    if same_leaf:
        return same_leaf[0]
    section = bad.partition(".")[0]
    in_section = [p for p in SPECS if p.startswith(section + ".")]
    for pool, probe in ((in_section, bad), (list(SPECS), bad)):
        close = difflib.get_close_matches(probe, pool, n=1, cutoff=0.6)
        if close:
            return close[0]
    leaves = {p.rpartition(".")[2]: p for p in SPECS}
    close = difflib.get_close_matches(leaf, list(leaves), n=1, cutoff=0.6)
    return leaves[close[0]] if close else None


def check_value(spec: FieldSpec, value: Any) -> str | None:
    """Why `value` is not allowed for `spec`, or None when it is."""
    if value is None:
        return None if spec.optional else f"must not be null; expected {spec.allowed()}"
    if spec.also and any(type(value) is type(word) and value == word for word in spec.also):  # -1.0 is no -1
        return None
    tp = spec.type
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: is_number(value),
        bool: isinstance(value, bool),
        str: isinstance(value, str),
        list: isinstance(value, list),
        dict: isinstance(value, dict),
    }.get(tp, True)
    if not ok:
        quote = ("; quote it to keep it as written (YAML reads unquoted digits, and H:MM:SS as seconds, as numbers)"
                 if tp is str and is_number(value) else "")
        return f"expected {spec.allowed()}, got {type(value).__name__} `{value}`{quote}"
    if tp is list and spec.item_type is str and not all(isinstance(v, str) for v in value):
        return "expected a list of strings"
    if spec.choices and value not in spec.choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in spec.choices], n=1)
        hint = f"; did you mean `{close[0]}`?" if close else "."
        return f"`{value}` is not allowed{hint} Expected {spec.allowed()}"
    if tp in (int, float):
        if tp is float and (math.isnan(value) or math.isinf(value)):
            return f"must be a finite number; expected {spec.allowed()}"
        bad = ((spec.ge is not None and value < spec.ge) or (spec.gt is not None and value <= spec.gt)
               or (spec.le is not None and value > spec.le) or (spec.lt is not None and value >= spec.lt))
        if bad:
            return f"{value} is out of range; expected {spec.allowed()}"
    return None


def _walk(composed: Composed, data: dict, cls, prefix: str, problems: list[Problem]) -> None:
    known = section_fields(cls)
    for key, value in data.items():
        path = f"{prefix}{key}"
        where = composed.layer_of(path)
        if key not in known:
            if not prefix and isinstance(value, dict):  # a misspelt or made-up section
                sections = [k for k in known if k != "stage"]
                close = difflib.get_close_matches(str(key), sections, n=1, cutoff=0.6)
                hint = f"; did you mean `{close[0]}`?" if close else "."
                problems.append(Problem(path, where, f"unknown section{hint} Valid sections: {', '.join(sections)}"))
            else:
                guess = closest_key(path)
                hint = f"; did you mean `{guess}`?" if guess else ""
                problems.append(Problem(path, where, f"unknown key{hint}"))
            continue
        base, optional, item = _unwrap(known[key][1])
        if is_dataclass(base):
            if value is None and optional:  # an optional section left off (`slurm: null`)
                continue
            if not isinstance(value, dict):
                problems.append(Problem(path, where, f"`{key}` is a section; expected a mapping of keys, got "
                                                     f"`{value}`"))
                continue
            _walk(composed, value, base, path + ".", problems)
        elif base is list and is_dataclass(item):
            _check_rewards(composed, path, value, problems)
        else:
            msg = check_value(SPECS[path], value)
            if msg:
                problems.append(Problem(path, where, msg))


def _check_rewards(composed: Composed, path: str, value: Any, problems: list[Problem]) -> None:
    where = composed.layer_of(path)
    if value is None:
        return
    if not isinstance(value, list):
        problems.append(Problem(path, where, "expected a list of {fn, weight, kwargs, name} mappings"))
        return
    for i, item in enumerate(value):
        ipath = f"{path}[{i}]"
        if isinstance(item, str):  # shorthand: just the function
            item = {"fn": item}
            value[i] = item
        if not isinstance(item, dict):
            problems.append(Problem(ipath, where, "expected a mapping with `fn` (and optional weight, kwargs, name)"))
            continue
        for key, v in item.items():
            spec = REWARD_SPECS.get(key)
            if spec is None:
                close = difflib.get_close_matches(key, list(REWARD_SPECS), n=1)
                hint = f"; did you mean `{close[0]}`?" if close else "."
                problems.append(Problem(f"{ipath}.{key}", where, f"unknown reward key{hint} Valid: "
                                                                 f"{', '.join(REWARD_SPECS)}"))
                continue
            msg = check_value(spec, v)
            if msg:
                problems.append(Problem(f"{ipath}.{key}", where, msg))
        if "fn" not in item:
            problems.append(Problem(f"{ipath}.fn", where, "missing: name a built-in reward, `pkg.module:function` or "
                                                          "`file.py:function`"))


def _get(data: dict, path: str, default: Any = None) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return SPECS[path].default if path in SPECS else default
        node = node[part]
    return node


def _nvidia_visible() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return Path("/proc/driver/nvidia/gpus").is_dir() and any(Path("/proc/driver/nvidia/gpus").iterdir())


def _stage_checks(c: Composed, problems: list[Problem], for_train: bool, check_files: bool = True,
                  trains: bool = True) -> StageChecks:
    report = lambda key, msg, level="error": problems.append(Problem(key, c.layer_of(key), msg, level))  # noqa: E731
    return StageChecks(stage=c.stage, hw=c.hw, get=lambda p: _get(c.data, p), report=report,
                       limit=lambda key: SPECS[key].le, set_by_user=c.set_by_user, for_train=for_train,
                       check_files=check_files, trains=trains)


def _cross_field(c: Composed, problems: list[Problem], for_train: bool, check_files: bool = True) -> None:
    """Rules across keys: each stage's own (its spec's checks, every section's), then the shared ones by topic."""
    spec = STAGE_SPECS[c.stage]
    checks = _stage_checks(c, problems, for_train, check_files)
    for other in STAGE_SPECS.values():  # every section stays consistent in itself, whichever stage runs
        if other.section_checks is not None:
            other.section_checks(checks)
    if spec.checks is not None:
        spec.checks(checks)
    from rlft.config.eval_sampling import check_eval

    check_eval(checks)
    from rlft.config.sampling import check_sampling

    check_sampling(checks)
    _run_shape_checks(c, problems)
    _precision_and_model_checks(c, problems)
    _hardware_checks(c, problems)
    _data_checks(c, problems, for_train)


def _run_shape_checks(c: Composed, problems: list[Problem]) -> None:
    """Reward reloading, streaming/async beside processes, the chat template's reserved names."""
    d = c.data
    g = lambda p: _get(d, p)  # noqa: E731
    err = lambda key, msg, level="error": problems.append(Problem(key, c.layer_of(key), msg, level))  # noqa: E731
    spec = STAGE_SPECS[c.stage]
    if g("monitor.reward_hot_reload") is True and (not spec.reloads_rewards or g("env.name")):
        reloads = " and ".join(s.name.upper() for s in STAGE_SPECS.values() if s.reloads_rewards)
        err("monitor.reward_hot_reload", f"hot reload acts on reward functions scored each step of {reloads}; "
            f"stage `{c.stage}`{' with env.name (episodes score through the environment)' if g('env.name') else ''} "
            f"does not reload them", "warning")
    ahead = [k for k in (f"{c.stage}.async.max_steps_off_policy", f"{c.stage}.stream_minibatch.num_minibatches")
             if k in SPECS and isinstance(g(k), int)]
    nproc = g("hw.num_processes")
    if ahead and isinstance(nproc, int) and nproc > 1:
        err(ahead[0], f"streaming and async training run in one process (the sampler is an in-process copy of the "
            f"policy); hw.num_processes is {nproc}. Use a single-process profile (--hw cpu, rtx4090 or a100)")
    template_kwargs = g("data.chat_template_kwargs")
    for name in (template_kwargs if isinstance(template_kwargs, dict) else ()):
        if name in RESERVED_TEMPLATE_KWARGS:
            err("data.chat_template_kwargs", f"`{name}` is a name the chat template renderer passes itself; template "
                                             f"variables may not use any of: {', '.join(RESERVED_TEMPLATE_KWARGS)}")


def _precision_and_model_checks(c: Composed, problems: list[Problem]) -> None:
    """Precision, LoRA, the reference model and the prompt length."""
    d = c.data
    g = lambda p: _get(d, p)  # noqa: E731
    err = lambda key, msg, level="error": problems.append(Problem(key, c.layer_of(key), msg, level))  # noqa: E731
    spec = STAGE_SPECS[c.stage]
    if g("train.bf16") is True and g("train.fp16") is True:
        err("train.fp16", "train.bf16 and train.fp16 are both true; pick one precision")
    if g("hw.device") == "mps" and g("train.bf16") is True:
        err("train.bf16", "bf16 is not supported on Apple MPS (M1/M2); use train.fp16=true or fp32")
    if g("hw.device") == "mps" and g("train.tf32") is True:
        err("train.tf32", "tf32 exists only on NVIDIA Ampere+ GPUs; set train.tf32=null on MPS")
    if g("lora.enabled") is True and g("lora.lora_alpha") is None:
        err("lora.lora_alpha", "missing while LoRA is on; set it (usually 2 x lora.r)")
    ref = g("model.ref")
    if ref == "init" and not g("model.init_from"):
        err("model.ref", "`init` means the model this stage starts from and needs model.init_from (an earlier run)")
    if isinstance(ref, str) and ref not in ("base", "init", "none", "") and not Path(ref).expanduser().exists():
        if ref.startswith((".", "/", "~")) or ref.count("/") > 1 or (os.sep != "/" and os.sep in ref):
            err("model.ref", f"reference checkpoint not found: {ref}")
        elif "/" in ref:  # `org/name`: a hub id, or a relative folder that is missing
            err("model.ref", f"no local folder `{ref}`; it will be loaded as a hub id", "warning")
    section = spec.section
    if section and f"{section}.max_prompt_length" in SPECS and f"{section}.max_length" in SPECS:
        # within the effective max_length (capped by train.max_seq_length): an error when the user set it, else derived
        check_prompt_length(c, section, g, problems)


def _hardware_checks(c: Composed, problems: list[Problem]) -> None:
    """Processes, machines, health thresholds, the device this machine has, the sequence budget."""
    d = c.data
    g = lambda p: _get(d, p)  # noqa: E731
    err = lambda key, msg, level="error": problems.append(Problem(key, c.layer_of(key), msg, level))  # noqa: E731
    spec = STAGE_SPECS[c.stage]
    # hardware and processes
    strategy, nproc = g("hw.distributed_strategy"), g("hw.num_processes")
    if isinstance(nproc, int) and nproc > 1 and strategy == "none":
        err("hw.num_processes", "more than one process needs hw.distributed_strategy ddp, fsdp or deepspeed")
    machines = g("hw.num_machines")
    if strategy == "fsdp" and isinstance(nproc, int) and isinstance(machines, int) and nproc * machines < 2:
        err("hw.num_processes", "hw.distributed_strategy=fsdp shards over processes and needs at least 2 "
                                "(hw.num_processes x hw.num_machines); use 2 or more, or a single-process profile")
    if isinstance(g("hw.num_machines"), int) and g("hw.num_machines") > 1 and not g("hw.main_process_ip"):
        if isinstance(d.get("slurm"), dict):
            err("hw.main_process_ip", "not set: fine for the SLURM script, which passes its first node's address; "
                "running each machine's command yourself needs the address of rank 0", "warning")
        else:
            err("hw.main_process_ip", "multi-node runs (hw.num_machines > 1) need the address of rank 0")
    if isinstance(g("hw.num_machines"), int) and g("hw.num_machines") > 1 and not g("train.output_dir"):
        err("train.output_dir", "not set: each machine would name its own runs/<stage>-<time>; set the same path on "
            "every machine (machine 0 writes the run there; with full fine-tuning every machine writes its checkpoint "
            "shards there, so it must be on a shared filesystem)", "warning")
    if isinstance(g("hw.num_machines"), int) and g("hw.num_machines") > 1 and strategy == "none":
        err("hw.num_machines", "more than one machine needs hw.distributed_strategy ddp, fsdp or deepspeed (with none "
                               "each machine would train a run of its own)")
    if isinstance(g("hw.machine_rank"), int) and isinstance(g("hw.num_machines"), int) \
            and g("hw.machine_rank") >= g("hw.num_machines"):
        err("hw.machine_rank", f"must be below hw.num_machines ({g('hw.num_machines')})")
    if g("monitor.grad_norm_warn") and g("monitor.grad_norm_critical") and is_number(g("monitor.grad_norm_warn")) \
            and is_number(g("monitor.grad_norm_critical")) \
                    and g("monitor.grad_norm_warn") > g("monitor.grad_norm_critical"):
        err("monitor.grad_norm_warn", "warning threshold is above the critical one")
    # hardware fit that needs no torch import: a warning, so a laptop can check a GPU config
    device = g("hw.device")
    if device == "cuda" and not _nvidia_visible():
        err("hw.device", f"profile `{c.hw}` wants an NVIDIA GPU and none is visible here (fine when checking a config "
                         "to run elsewhere; use --hw cpu to run locally)", "warning")
    if device == "mps" and platform.system() != "Darwin":
        err("hw.device", "profile wants Apple MPS, which exists only on macOS (fine when checking a config to run "
                         "elsewhere)", "warning")
    if device == "cpu" and g("train.bf16") is True:
        err("train.bf16", "bf16 on the cpu profile is slow or unsupported on many CPUs; prefer fp32", "warning")
    msl, sec = g("train.max_seq_length"), spec.section
    mt = g(f"{sec}.max_tokens") if spec.samples and f"{sec}.max_tokens" in SPECS else None
    if isinstance(msl, int) and isinstance(mt, int) and mt >= msl:
        err("train.max_seq_length", f"{msl} leaves no room for the prompt: {sec}.max_tokens ({mt}) of it are "
            f"the completion; raise train.max_seq_length or lower {sec}.max_tokens")


def _data_checks(c: Composed, problems: list[Problem], for_train: bool) -> None:
    """Training data and rewards: a warning while checking profiles, an error when training."""
    d = c.data
    g = lambda p: _get(d, p)  # noqa: E731
    err = lambda key, msg, level="error": problems.append(Problem(key, c.layer_of(key), msg, level))  # noqa: E731
    spec = STAGE_SPECS[c.stage]
    # data and rewards: a warning while checking profiles, an error when training
    level = "error" if for_train else "warning"
    env = g("env.name")
    if env and not spec.uses_env:
        users = " or ".join(f"`{s.name}`" for s in stage_sections() if s.uses_env)
        err("env.name", f"multi-turn episodes run with stage {users}; stage `{c.stage}` does not use an environment")
    if not g("data.train") and not env:
        err("data.train", "no training data set (jsonl, json, csv, parquet, a saved datasets folder, or `demo`)", level)
    if spec.samples and not g("rewards") and not env:
        # `rewards:` left empty in the user's own file is no profile being checked: an error there too
        err("rewards", f"stage `{c.stage}` samples completions and needs at least one reward function",
            "error" if c.set_by_user("rewards") else level)

# control characters: C0 (line feed, carriage return, tab, ...), DEL, C1, and Unicode's line/paragraph separators
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# the values `--dry-run` prints into its command lines and the SLURM script into its lines, comments included
LAUNCH_TEXT = ("train.output_dir", "hw.main_process_ip", "slurm.partition", "slurm.job_name", "slurm.time")


def control_character(value: str) -> str | None:
    """The first control character in `value`, written as Python writes it (`'\\n'`), or None."""
    found = CONTROL.search(value)
    return None if found is None else repr(found.group())


def _check_launch_text(c: Composed, problems: list[Problem]) -> None:
    """A line break (or any control character) in a value that reaches the printed launch lines or the SLURM
    script would end the line it is written on (a comment line, too) and run the rest as a command: refused."""
    refused = {p.key for p in problems if p.level == "error"}  # e.g. `slurm.job_name` with a line break: one word
    for key in LAUNCH_TEXT:
        value = _get(c.data, key)
        bad = control_character(value) if isinstance(value, str) else None
        if bad and key not in refused:
            problems.append(Problem(key, c.layer_of(key), f"contains a control character ({bad}); it is written into "
                                    "the launch commands and the SLURM script, where it would end a line: use "
                                    "printable characters only"))
    section = c.data.get("slurm")
    extra = section.get("extra") if isinstance(section, dict) else None
    for i, line in enumerate(extra if isinstance(extra, list) else []):
        bad = control_character(line.replace("\t", " ")) if isinstance(line, str) else None
        if bad and f"slurm.extra[{i}]" not in refused:  # a line break has its own message (_check_slurm)
            problems.append(Problem(f"slurm.extra[{i}]", c.layer_of("slurm.extra"), f"contains a control character "
                                    f"({bad}); give each line of the script as printable text"))


def _check_slurm(c: Composed, problems: list[Problem]) -> None:
    """The `slurm:` section against the script it becomes: sbatch's time forms, one word where sbatch takes one, one
    line per `extra` entry, and as many nodes as hw.num_machines (the script starts one task per machine)."""
    section = c.data.get("slurm")
    if not isinstance(section, dict):
        return
    g = lambda p: _get(c.data, p)  # noqa: E731
    err = lambda key, msg: problems.append(Problem(key, c.layer_of(key), msg))  # noqa: E731
    time = section.get("time")
    if isinstance(time, str) and not re.fullmatch(SLURM_TIME, time.strip()):
        err("slurm.time", f"`{time}` is not a SLURM time limit; expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                          "D-HH:MM:SS (e.g. 04:00:00)")
    for key in ("partition", "job_name"):
        value = section.get(key)
        if isinstance(value, str) and (not value.strip() or re.search(r"\s", value)):
            err(f"slurm.{key}", f"`{value}` must be one word (no spaces or line breaks)")
    extra = section.get("extra")
    if isinstance(extra, list):
        for i, line in enumerate(extra):
            if isinstance(line, str) and ("\n" in line or "\r" in line):
                problems.append(Problem(f"slurm.extra[{i}]", c.layer_of("slurm.extra"), "one line per entry: give "
                                        "each line of the script as its own list item"))
    nodes, machines = section.get("nodes"), g("hw.num_machines")
    if isinstance(nodes, int) and isinstance(machines, int) and nodes != machines:
        err("slurm.nodes", f"{nodes} nodes but hw.num_machines is {machines} ({c.layer_of('hw.num_machines')}): the "
                           f"script starts one task per machine; set hw.num_machines={nodes}, or leave slurm.nodes "
                           "out (it follows hw.num_machines)")
    gpus, nproc = section.get("gpus_per_node"), g("hw.num_processes")
    if g("hw.device") == "cuda" and isinstance(gpus, int) and 0 < gpus < (nproc if isinstance(nproc, int) else 0):
        err("slurm.gpus_per_node", f"{gpus} GPUs per node but hw.num_processes is {nproc} "
                                   f"({c.layer_of('hw.num_processes')}): one process per GPU; set "
                                   f"slurm.gpus_per_node={nproc} or hw.num_processes={gpus}")


def _check_rewards_resolve(c: Composed, problems: list[Problem]) -> None:
    for key in ("rewards", "eval.rewards"):  # the training rewards and the eval-only ones resolve alike
        rewards = _get(c.data, key)
        if not rewards or not isinstance(rewards, list):
            continue
        from rlft.rewards.registry import check_reward_kwargs, check_reward_spec, module_search_dir

        config_dir = c.dir_of(key)
        for i, item in enumerate(rewards):
            if isinstance(item, dict) and isinstance(item.get("fn"), str):
                msg = check_reward_spec(item["fn"], module_search_dir(item["fn"], config_dir))
                if msg:
                    problems.append(Problem(f"{key}[{i}].fn", c.layer_of(key), msg))
                    continue
                for name, problem in check_reward_kwargs(item["fn"], item.get("kwargs") or {},
                                                         getattr(c, "pending", ())):  # a built-in's own check
                    where = f"{key}[{i}].kwargs" + (f".{name}" if name else "")
                    problems.append(Problem(where, c.layer_of(key), f"reward `{item['fn']}`: {problem}"))


def _reward_names(rewards: Any) -> list[tuple[int, str]]:
    """(index, name) of each entry of a rewards list as the suite names it: `name`, else the function's short
    name, repeats suffixed _2, _3 (rlft.rewards.safe.build_reward_suite's rule)."""
    from rlft.rewards.registry import reward_short_name

    out, taken = [], set()
    for i, item in enumerate(rewards if isinstance(rewards, list) else ()):
        item = {"fn": item} if isinstance(item, str) else item
        if not isinstance(item, dict) or not isinstance(item.get("fn"), str):
            continue
        base = str(item.get("name") or reward_short_name(item["fn"]))
        name, k = base, 2
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        out.append((i, name))
    return out


def _check_eval_reward_names(c: Composed, problems: list[Problem]) -> None:
    """An eval-only reward named like a training reward would share its column in the rows and its key in the
    results, where the training reward's scores replace it: refused, so neither is silently lost."""
    train = dict((name, i) for i, name in _reward_names(_get(c.data, "rewards")))
    for i, name in _reward_names(_get(c.data, "eval.rewards")):
        if name in train:
            key = f"eval.rewards[{i}]"
            problems.append(Problem(key, c.layer_of("eval.rewards"),
                                    f"named `{name}`, as rewards[{train[name]}] ({c.layer_of('rewards')}) is: "
                                    f"eval-only scores are reported by name beside the training rewards'; give it its "
                                    f"own `name:` (e.g. `name: eval_{name}`)"))


def _check_env_resolve(c: Composed, problems: list[Problem]) -> None:
    spec = _get(c.data, "env.name")
    if not isinstance(spec, str):
        return
    from rlft.config.env_spec import check_env_spec
    from rlft.rewards.registry import module_search_dir

    msg = check_env_spec(spec, module_search_dir(spec, c.dir_of("env")) or c.dir_of("env"))
    if msg:
        problems.append(Problem("env.name", c.layer_of("env.name"), msg))


def _check_data(c: Composed, problems: list[Problem], trains: bool = True) -> None:
    d = c.data
    cols = [_get(d, key) for key in STAGE_SPECS[c.stage].data_columns]
    for key in ("data.train", "data.eval"):
        path = _get(d, key)
        if not isinstance(path, str) or path == "demo" or path.startswith("builtin:"):
            continue
        from rlft.data.peek import DataError, check_columns  # a file to read: csv and json only then

        try:
            for msg in check_columns(path, [x for x in cols if isinstance(x, str)], key=key):
                problems.append(Problem(key, c.layer_of(key), msg))
        except DataError as exc:
            problems.append(Problem(key, c.layer_of(key), str(exc)))
    _check_reward_columns(c, problems)


def looks_local(name: str) -> bool:
    """A model name that can only mean a folder: `./x`, `../x`, `/x`, `~/x`, `a/b/c`, or `a/b` where `a` is a
    local folder (a hub id is `org/name`)."""
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name):
        return True
    return "/" in name and Path(name.split("/", 1)[0]).expanduser().is_dir()


def _check_model_path(c: Composed, problems: list[Problem]) -> None:
    """A mistyped local model folder is a config error now, not a hub lookup traceback after minutes."""
    name = _get(c.data, "model.name_or_path")
    if not isinstance(name, str) or name == "tiny" or Path(name).expanduser().exists() or not looks_local(name):
        return
    path = Path(name).expanduser()
    parent = path.parent
    hint = ""
    if parent.is_dir():
        siblings = sorted(p.name for p in parent.iterdir() if p.is_dir())
        close = difflib.get_close_matches(path.name, siblings, n=1, cutoff=0.5)
        if close:
            hint = f"; did you mean `{str(parent / close[0]) if str(parent) != '.' else close[0]}`?"
        elif siblings:
            hint = f" (folders in {parent}: {', '.join(siblings[:8])}{', ...' if len(siblings) > 8 else ''})"
    else:
        hint = f" (no folder {parent} either)"
    problems.append(Problem("model.name_or_path", c.layer_of("model.name_or_path"),
                            f"model folder not found: {name}{hint}"))


def _check_reward_columns(c: Composed, problems: list[Problem]) -> None:
    """A column a reward reads that data.train (or data.eval, scored at every evaluation) lacks would fail at the
    first scored step or evaluation: say so now."""
    rewards = c.data.get("rewards") or []
    if not rewards or not isinstance(rewards, list) or not STAGE_SPECS[c.stage].samples:
        return
    for key in ("data.train", "data.eval"):
        path = _get(c.data, key)
        if isinstance(path, str):
            _check_reward_columns_of(c, problems, rewards, key, path)


def _check_reward_columns_of(c: Composed, problems: list[Problem], rewards: list, key: str, path: str) -> None:
    from rlft.data.peek import DataError, peek_columns
    from rlft.rewards.registry import reward_columns

    if path == "demo":
        from rlft.data.demo import demo_prompts

        columns = list(demo_prompts()[0])
    elif path.startswith("builtin:"):
        return
    else:
        try:
            columns = peek_columns(path).columns
        except DataError:
            return  # reported by the data check
    prompt = _get(c.data, "data.prompt_column")
    present = [("prompt" if col == prompt else col) for col in columns]  # the prompt column reaches rewards as `prompt`
    for i, item in enumerate(rewards):
        if not isinstance(item, dict) or not isinstance(item.get("fn"), str):
            continue
        kwargs = item.get("kwargs") if isinstance(item.get("kwargs"), dict) else {}
        for col in reward_columns(item["fn"], kwargs):
            if col in present:
                continue
            close = difflib.get_close_matches(col, present, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            where = f"rewards[{i}].kwargs.column" if col in (kwargs.get("column"), *(kwargs.get("columns") or ())) \
                else f"rewards[{i}].fn"
            problems.append(Problem(where, c.layer_of("rewards"),
                                    f"reward `{item['fn']}` reads column `{col}`, which {key} ({path}) lacks "
                                    f"(columns: {', '.join(present)}){hint}; set the reward's kwargs.column"))


def _check_other_stage_sections(c: Composed, problems: list[Problem]) -> None:
    """A key the user set in another stage's section (`dpo.beta` in a GRPO run) does nothing: say so.
    The shipped profiles are not the user's doing, so only -c files and the command line count."""
    own = STAGE_SPECS[c.stage].section
    seen: set[str] = set()
    for layer in c.layers:
        if layer.profile:
            continue
        for path, value in layer.flat.items():
            section = path.partition(".")[0]
            if "." not in path or section == own or section not in STAGE_SECTIONS or isinstance(value, dict) \
                    or path in seen:
                continue
            seen.add(path)
            problems.append(Problem(path, c.layer_of(path), f"has no effect: `{section}` configures stage "
                                    f"`{STAGE_SECTIONS[section]}` and this run is stage `{c.stage}`", "warning"))


def _check_trl_passthrough(c: Composed, problems: list[Problem]) -> None:
    extra = c.data.get("trl")
    if not isinstance(extra, dict) or not extra:
        return
    from rlft.config.trl_fields import modeled_by_rlft, trainer_config_fields, trainer_config_types, value_problem

    spec = STAGE_SPECS[c.stage]
    checks = _stage_checks(c, problems, for_train=False, check_files=False)
    if spec.trl_config is None:
        own = f"`{spec.section}:` and `train:` configure it" if spec.section else "`train:` configures it"
        unread = f"stage `{c.stage}` runs rlft's own trainer, which does not read trl: keys; drop it ({own})"
    else:
        unread = spec.trl_unread(checks) if spec.trl_unread is not None else None
    if unread:  # a strict config never accepts what it ignores
        for key in extra:
            problems.append(Problem(f"trl.{key}", c.layer_of(f"trl.{key}"), unread))
        return
    valid = trainer_config_fields(c.stage)
    if valid is None:
        return
    before = len(problems)
    if spec.trl_checks is not None:
        spec.trl_checks(checks)
    reported = {p.key for p in problems[before:]}  # one message a key: the conflict, not also "set X instead"
    if extra.get("load_best_model_at_end") is True:
        # transformers needs evaluation on the save schedule to know the best checkpoint
        where = c.layer_of("trl.load_best_model_at_end")
        if not _get(c.data, "data.eval"):
            # like missing data: a warning while checking a profile, an error once there is data to train on
            level = "error" if _get(c.data, "data.train") else "warning"
            problems.append(Problem("trl.load_best_model_at_end", where,
                                    "needs evaluation to pick the best checkpoint: set data.eval (rlft evaluates "
                                    "every train.eval_steps only when data.eval is set), or drop this option", level))
        es, ss = _get(c.data, "train.eval_steps"), _get(c.data, "train.save_steps")
        if isinstance(es, int) and isinstance(ss, int) and es and ss % es:
            problems.append(Problem("train.save_steps", c.layer_of("train.save_steps"),
                                    f"trl.load_best_model_at_end needs train.save_steps ({ss}) to be a multiple of "
                                    f"train.eval_steps ({es})"))
    for key in extra:
        path = f"trl.{key}"
        where = c.layer_of(path)
        if path in reported:
            continue
        modeled = modeled_by_rlft(c.stage)
        if key not in valid:
            close = difflib.get_close_matches(key, sorted(valid), n=1)
            # a near miss of an option rlft sets itself points at rlft's key, not at a trl: key refused in turn
            hint = (f"; did you mean `{modeled[close[0]]}` (TRL's `{close[0]}`, which rlft sets)?"
                    if close and close[0] in modeled else f"; did you mean `trl.{close[0]}`?" if close else "")
            problems.append(Problem(path, where, f"not an option of TRL's trainer config for stage `{c.stage}`{hint}"))
        elif key in modeled:
            problems.append(Problem(path, where, f"set `{modeled[key]}` instead: rlft maps it onto TRL itself"))
        else:
            msg = value_problem(trainer_config_types(c.stage)[key], extra[key])
            if msg:
                problems.append(Problem(path, where, msg))


def validate(c: Composed, *, for_train: bool = False, check_files: bool = True,
             trains: bool = True) -> tuple[RlftConfig, list[Problem]]:
    """Return the typed config and warnings; raise ConfigError with every error (and warning). `trains=False`
    (eval, rewards try: the config only samples and scores) skips the checks that its data fills a training step."""
    problems: list[Problem] = []
    if check_files and _get(c.data, "model.init_from"):
        from rlft.config.init_from import resolve_init_from  # reads an earlier run: only a config that names one

        resolve_init_from(c, problems)  # may name the base model, which `auto` learning rates read
    resolve_learning_rate(c, problems)
    if "rewards" in c.data and c.data["rewards"] is None:
        c.data["rewards"] = []  # `rewards:` with nothing under it (YAML null) means no reward functions
    _walk(c, c.data, RlftConfig, "", problems)
    if c.data.get("stage", c.stage) != c.stage:
        problems.append(Problem("stage", c.layer_of("stage"), f"`{c.data['stage']}` contradicts --stage {c.stage}"))
    c.data["stage"] = c.stage
    _cross_field(c, problems, for_train, check_files)  # guarded by type checks, so it is safe after type errors
    _check_slurm(c, problems)
    _check_launch_text(c, problems)
    _check_other_stage_sections(c, problems)
    if not any(p.level == "error" for p in problems):
        if check_files:
            _check_rewards_resolve(c, problems)
            _check_env_resolve(c, problems)
            _check_data(c, problems, trains)
            spec = STAGE_SPECS[c.stage]
            if spec.file_checks is not None:
                spec.file_checks(_stage_checks(c, problems, for_train, check_files, trains))
            _check_model_path(c, problems)
        _check_eval_reward_names(c, problems)
        _check_trl_passthrough(c, problems)
    errors = [p for p in problems if p.level == "error"]
    if errors:
        raise ConfigError(problems)
    return from_dict(RlftConfig, c.data), problems
