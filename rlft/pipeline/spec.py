"""A pipeline file, read and composed per stage without importing torch.

```yaml
name: tool_use                 # optional; default: the file's name
output_dir: runs/tool_use      # optional; default: runs/<name>
defaults:                      # config shared by every stage
  model: {name_or_path: Qwen/Qwen2.5-7B-Instruct}
stages:
  - stage: orpo                # required
    hw: a100                   # optional; default: --hw of the command (cpu)
    config: [orpo.yaml]        # optional; a file or a list, relative to this file
    name: preferences          # optional; default: the stage
    train: {learning_rate: 5.0e-6}   # any other key: this stage's own config
```

Layers of stage i: base < stage profile < hardware profile < `defaults` < the stage's config files <
its own keys < command-line overrides (`KEY=VALUE` for every stage, `stages.<i or name>.KEY=VALUE` for
one; stages are numbered from 1 like their run folders) < what the pipeline sets itself (the run
folder `<output_dir>/<NN>-<stage>` and `model.init_from` = the stage before, unless the entry sets
`model.init_from` itself). A stage whose final/ is no policy (`rm`: a reward model) is skipped by that chain:
the stage after it starts from the policy before it.

A value may name an earlier stage's model: `${stages.<name or number>.final}` (its final/ folder) or
`${stages.<name or number>.dir}` (its run folder), anywhere in `defaults:` or an entry, e.g. a later stage's
`rewards: [{fn: reward_model, kwargs: {path: ${stages.rm.final}}}]`. Only earlier stages can be named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re

import yaml

from rlft.config.compose import Composed, Layer, _key_lines, anchor_paths, compose, display_path, read_yaml_file
from rlft.config.errors import ConfigError, Problem
from rlft.config.schema import HARDWARE, STAGES
from rlft.rundir.markers import check_name

ENTRY_KEYS = ("stage", "hw", "config", "name")  # the rest of an entry is config
STAGE_REF = re.compile(r"\$\{stages\.([^.}]+)\.(final|dir)\}")  # `${stages.rm.final}`
TOP_KEYS = ("name", "output_dir", "defaults", "stages")


@dataclass
class StageEntry:
    index: int                    # 1-based, as in the run folder name
    stage: str
    hw: str | None
    files: list[Path]
    name: str
    layer: Layer                  # the entry's own config keys
    sets_init_from: bool          # the entry chose its own model.init_from (or null to start fresh)

    @property
    def label(self) -> str:
        return f"stage {self.index} ({self.name})"

    @property
    def folder(self) -> str:
        return f"{self.index:02d}-{self.stage}"


@dataclass
class Pipeline:
    path: Path
    name: str
    output_dir: Path
    defaults: Layer
    stages: list[StageEntry] = field(default_factory=list)

    def stage_dir(self, entry: StageEntry) -> Path:
        return self.output_dir / entry.folder

    def select(self, selector: str) -> StageEntry | None:
        """A stage by 1-based index or by name (entry name, then stage)."""
        if selector.isdigit():
            i = int(selector)
            return self.stages[i - 1] if 1 <= i <= len(self.stages) else None
        for e in self.stages:
            if e.name == selector:
                return e
        matches = [e for e in self.stages if e.stage == selector]
        return matches[0] if len(matches) == 1 else None


def _sub_layer(name: str, data: dict, node, drop: tuple[str, ...] = (), source_dir: Path | None = None) -> Layer:
    lines: dict[str, int] = {}
    _key_lines(node, "", lines, [])
    data = {k: v for k, v in data.items() if k not in drop}
    lines = {k: v for k, v in lines.items() if k.partition(".")[0] not in drop}
    return Layer(name, data, lines, source_dir=source_dir)


def _value_node(mapping_node, key: str):
    if isinstance(mapping_node, yaml.MappingNode):
        for k, v in mapping_node.value:
            if k.value == key:
                return v
    return None


def load_pipeline(path: str | Path) -> Pipeline:
    """Read a pipeline file; every problem at once (ConfigError), each naming its line."""
    path = Path(path)
    shown = display_path(path)
    if not path.is_file():
        raise ConfigError([Problem("(file)", shown, f"pipeline file not found: {path}")])
    node, data = read_yaml_file(path, shown)  # size and alias caps, as for config files
    data = {} if node is None else data
    if not isinstance(data, dict):
        raise ConfigError([Problem("(yaml)", shown, "a pipeline file must be a mapping with a `stages:` list")])
    problems: list[Problem] = []
    lines: dict[str, int] = {}
    _key_lines(node, "", lines, [])
    at = lambda key: f"{shown}:{lines[key]}" if key in lines else shown  # noqa: E731
    for key in data:
        if key not in TOP_KEYS:
            problems.append(Problem(str(key), at(str(key)), "unknown pipeline key; expected one of "
                                                            f"{', '.join(TOP_KEYS)} "
                                    "(stage config goes under `defaults:` or a stage entry)"))
    base_dir = path.resolve().parent
    name = data.get("name") or path.stem
    bad = check_name(str(name), "name")
    if bad:  # the name becomes runs/<name>/: `../x` or `/abs` would put the runs outside the output root
        problems.append(Problem("name", at("name"), bad))
        name = path.stem
    out = Path(data.get("output_dir") or Path("runs") / str(name))  # like train.output_dir: from the working dir
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        problems.append(Problem("defaults", at("defaults"), "must be a mapping of config sections"))
        defaults = {}
    anchor_paths(defaults, base_dir)
    pipe = Pipeline(path, str(name), out,
                    _sub_layer(shown, defaults, _value_node(node, "defaults"), source_dir=base_dir))
    raw = data.get("stages")
    if not isinstance(raw, list) or not raw:
        problems.append(Problem("stages", at("stages"), "a pipeline needs a non-empty `stages:` list of {stage: ...} "
                                                        "entries"))
        raise ConfigError(problems)
    seq = _value_node(node, "stages")
    named: dict[str, tuple[int, str]] = {}  # stage name -> (position, line) of the first entry of that name
    for i, item in enumerate(raw, start=1):
        item_node = seq.value[i - 1] if isinstance(seq, yaml.SequenceNode) else None
        entry = _stage_entry(i, item, item_node, shown, base_dir, named, problems)
        if entry is not None:
            pipe.stages.append(entry)
    for entry in pipe.stages:
        for key, ref, why in bad_refs(pipe, entry):
            problems.append(Problem(key, entry.layer.where(key) if key in entry.layer.lines else shown,
                                    f"{entry.label}: `{ref}` {why}"))
    if problems:
        raise ConfigError(problems)
    return pipe


def _stage_entry(i: int, item, item_node, shown: str, base_dir: Path, named: dict[str, tuple[int, str]],
                 problems: list[Problem]) -> StageEntry | None:
    """Stage entry `i` of a pipeline file read, or None with its problem added; `named` keeps each stage name's
    first position and line (names must differ)."""
    where = f"{shown}:{item_node.start_mark.line + 1}" if item_node is not None else shown
    if not isinstance(item, dict) or not isinstance(item.get("stage"), str):
        problems.append(Problem(f"stages[{i}]", where, f"each stage needs `stage:` (one of {', '.join(STAGES)})"))
        return None
    stage, hw = item["stage"], item.get("hw")
    if stage not in STAGES:
        problems.append(Problem(f"stages[{i}].stage", where, f"unknown stage `{stage}`; expected one of "
                                                             f"{', '.join(STAGES)}"))
        return None
    if hw is not None and hw not in HARDWARE:
        problems.append(Problem(f"stages[{i}].hw", where, f"unknown hardware profile `{hw}`; expected one of "
                                                          f"{', '.join(HARDWARE)}"))
        return None
    files = item.get("config") or []
    files = [files] if isinstance(files, str) else files
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        problems.append(Problem(f"stages[{i}].config", where, "must be a file name or a list of file names"))
        return None
    bad = check_name(str(item["name"]), f"stages[{i}].name") if "name" in item else None
    if bad:
        problems.append(Problem(f"stages[{i}].name", where, bad))
        return None
    name = str(item.get("name") or stage)
    if name.isdigit():  # `stages.2.KEY=VALUE` means stage 2
        problems.append(Problem(f"stages[{i}].name", where, f"`{name}` reads as a stage number in "
                                                             "stages.<number or name>.KEY=VALUE; give a name with "
                                                             "a letter in it"))
        return None
    if name in named:  # `stages.<name>.KEY=VALUE` would change only the first of them
        first, first_where = named[name]
        how = "its `name:`" if "name" in item else f"its stage (`{stage}`), as it has no `name:`"
        problems.append(Problem(f"stages[{i}].name", where, f"stage {i} is named `{name}` ({how}), as is stage "
                                                             f"{first} ({first_where}): stage names must differ, "
                                                             f"since stages.<name>.KEY=VALUE picks one stage; "
                                                             f"give each a `name:` of its own"))
        return None
    named[name] = (i, where)
    own = {k: v for k, v in item.items() if k not in ENTRY_KEYS}
    anchor_paths(own, base_dir)
    entry_lines: dict[str, int] = {}
    _key_lines(item_node, "", entry_lines, [])
    layer = Layer(shown, own, {k: v for k, v in entry_lines.items() if k.partition(".")[0] not in ENTRY_KEYS},
                  source_dir=base_dir)
    model = own.get("model") if isinstance(own.get("model"), dict) else {}
    return StageEntry(i, stage, hw, [base_dir / f for f in files], name, layer, "init_from" in model)


def _strings(data, prefix: str = ""):
    """(dotted key, string) of every string value in a config mapping, lists included."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        key = f"{prefix}.{k}" if isinstance(data, dict) and prefix else str(k) if isinstance(data, dict) \
            else f"{prefix}[{k}]"
        if isinstance(v, str):
            yield key, v
        else:
            yield from _strings(v, key)


def bad_refs(pipe: Pipeline, entry: StageEntry) -> list[tuple[str, str, str]]:
    """(key, reference, why) for each `${stages.X.final}` in the entry (and the defaults) that names no earlier
    stage."""
    found = []
    for layer in (pipe.defaults, entry.layer):
        for key, value in _strings(layer.data):
            for m in STAGE_REF.finditer(value):
                target = pipe.select(m.group(1))
                if target is None:
                    names = ", ".join(e.name for e in pipe.stages)
                    found.append((key, m.group(0), f"names no stage of this pipeline (stages: {names})"))
                elif target.index >= entry.index:
                    found.append((key, m.group(0), f"names stage {target.index} ({target.name}), which runs "
                                                   f"{'as' if target is entry else 'after'} this one; only an "
                                                   "earlier stage's model exists by then"))
    return found


def with_refs(pipe: Pipeline, entry: StageEntry, layer: Layer) -> tuple[Layer, list[str]]:
    """`layer` with each `${stages.X.final|dir}` replaced by that earlier stage's folder, and those folders."""
    paths: list[str] = []

    def sub(value):
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        if not isinstance(value, str) or "${stages." not in value:
            return value

        def folder(m):
            target = pipe.select(m.group(1))
            if target is None or target.index >= entry.index:  # load_pipeline reported it
                return m.group(0)
            path = pipe.stage_dir(target) / ("final" if m.group(2) == "final" else "")
            paths.append(str(path))
            return str(path)

        return STAGE_REF.sub(folder, value)

    data = sub(layer.data)
    if not paths:
        return layer, []
    return Layer(layer.name, data, layer.lines, source_dir=layer.source_dir, profile=layer.profile), paths


def split_overrides(pipe: Pipeline, overrides: list[str]) -> tuple[list[str], dict[int, list[str]], list[Problem]]:
    """Command-line KEY=VALUE into (every stage, {stage index: its own}), or problems for unknown stages."""
    common: list[str] = []
    own: dict[int, list[str]] = {}
    problems: list[Problem] = []
    for item in overrides:
        key = item.partition("=")[0]
        if key.startswith("stages."):
            selector, _, rest = key[len("stages."):].partition(".")
            entry = pipe.select(selector)
            if entry is None or not rest:
                names = ", ".join(f"{e.index} or {e.name}" for e in pipe.stages)
                problems.append(Problem(key, "command line", f"no stage `{selector}` in the pipeline (stages: "
                                                             f"{names}); "
                                        "write stages.<number or name>.<key>=<value>"))
                continue
            own.setdefault(entry.index, []).append(item[len("stages.") + len(selector) + 1:])
        else:
            common.append(item)
    return common, own, problems


def compose_stage(pipe: Pipeline, entry: StageEntry, common: list[str], own: list[str], hw_default: str,
                  init_from: Path | None, extra: tuple[Layer, ...] = ()) -> Composed:
    """The layered config of one stage; `init_from` is the run it starts from (None for the first); `extra`
    layers go last (`--smoke`'s changes)."""
    from rlft.config.init_from import is_finished

    implied: dict[str, Any] = {}
    if init_from is not None and not entry.sets_init_from:
        implied["model"] = {"init_from": str(init_from)}
    defaults, refs = with_refs(pipe, entry, pipe.defaults)
    own_layer, more = with_refs(pipe, entry, entry.layer)
    before = [defaults] + ([Layer(f"pipeline: starts from {init_from}", implied)] if implied else [])
    last = [Layer("pipeline: run folder", {"train": {"output_dir": str(pipe.stage_dir(entry))}})]
    composed = compose(entry.stage, entry.hw or hw_default, entry.files, [*common, *own],
                       before_files=before, after_files=[own_layer], last=[*last, *extra])
    # an earlier stage's model that does not exist yet (the pipeline has not run it): checked once it has
    composed.pending = tuple(p for p in refs + more if not is_finished(Path(p).parent if p.endswith("final")
                                                                             else Path(p)))
    return composed


def starts_next(entry: StageEntry) -> bool:
    """Whether the next stage starts from this one's final/ (a policy; an rm stage's reward model is not)."""
    from rlft.config.stages import get_spec

    return get_spec(entry.stage).trains_policy


def check_pipeline(pipe: Pipeline, overrides: list[str], hw_default: str):
    """Validate every stage at once: [(entry, cfg, composed, warnings)] or ConfigError naming each stage.

    A stage whose predecessor has not run yet is checked without its `init_from` (that run does not
    exist before the pipeline runs); a finished predecessor is checked as at run time."""
    from rlft.config.validate import validate

    common, own, problems = split_overrides(pipe, overrides)
    checked = []
    previous: Path | None = None
    for entry in pipe.stages:
        try:
            composed = compose_stage(pipe, entry, common, own.get(entry.index, []), hw_default, previous)
            cfg, warnings = validate(composed)
            checked.append((entry, cfg, composed, [w.for_stage(entry.label) for w in warnings]))
        except ConfigError as exc:
            problems.extend(p.for_stage(entry.label) for p in exc.problems)
        from rlft.config.init_from import is_finished

        run_dir = pipe.stage_dir(entry)
        if starts_next(entry):
            previous = run_dir if is_finished(run_dir) else None
    if any(p.level == "error" for p in problems):
        raise ConfigError(problems)
    return checked
