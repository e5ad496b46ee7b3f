"""Compose a config from layers, remembering which layer set each key.

Order, later wins: configs/base.yaml < configs/stages/<stage>.yaml < configs/hw/<hw>.yaml
< each -c FILE in the order given < KEY=VALUE overrides from the command line.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from rlft.config.errors import ConfigError, Problem
from rlft.config.schema import HARDWARE, STAGES
from rlft import run_files

CLI_LAYER = "command line"


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-6` as a float (YAML 1.1 insists on `1.0e-6`)."""


# The same loader over libyaml's parser (when PyYAML was built with it): about 8x faster, which is
# most of the time `pipeline validate` spends reading its dozen files. Resolver and constructor are
# PyYAML's own Python ones in both, so the values are the same.
_CLoader: type | None = None
if getattr(yaml, "__with_libyaml__", False):
    class _CLoader(yaml.CSafeLoader):  # type: ignore[no-redef]
        """CSafeLoader that also reads `1e-6` as a float, like _Loader."""

for _cls in (_Loader, _CLoader):
    if _cls is not None:
        _cls.add_implicit_resolver(
            "tag:yaml.org,2002:float",
            re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                       |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                       |\.[0-9_]+(?:[eE][-+][0-9]+)?
                       |[-+]?\.(?:inf|Inf|INF)
                       |\.(?:nan|NaN|NAN))$""", re.X),
            list("-+0123456789."),
        )


def configs_dir() -> Path:
    """Where the profiles live: the package's own `rlft/configs` (shipped in the wheel), or the
    folder named by RLFT_CONFIG_DIR (a folder with the same layout: base.yaml, stages/, hw/, examples/)."""
    env = os.environ.get("RLFT_CONFIG_DIR")
    if env:
        if not (Path(env) / "base.yaml").is_file():
            raise ConfigError([Problem("RLFT_CONFIG_DIR", "environment",
                                       f"{env} is not a profiles folder (it needs base.yaml, stages/, hw/); "
                                       f"unset RLFT_CONFIG_DIR to use the profiles shipped with rlft")])
        return Path(env)
    import rlft  # the package folder, where importlib.resources.files("rlft") points (without its 10 ms import)

    return Path(rlft.__file__).parent / "configs"


def display_path(path: Path) -> str:
    """A short, machine-independent name for a file: `configs/...` for a bundled profile, else
    relative to the working directory."""
    path = Path(path).resolve()
    for root in (configs_dir().resolve().parent, Path.cwd()):
        try:
            return str(path.relative_to(root.resolve()))
        except ValueError:
            continue
    return str(path)


@dataclass
class Layer:
    """One layer of a config: a profile, a user's file or the command line, as parsed."""
    name: str                         # "configs/stages/grpo.yaml" or "command line"
    data: dict
    lines: dict[str, int] = field(default_factory=dict)  # key path -> line in the file
    source_dir: Path | None = None    # the file's folder; None for the command line
    profile: bool = False             # a shipped profile (base, stage, hardware), not the user's own file
    flat: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.flat = flatten(self.data)

    def where(self, path: str) -> str:
        line = self.lines.get(path)
        return f"{self.name}:{line}" if line else self.name


def _key_lines(node, prefix: str, out: dict[str, int], dups: list[tuple[str, int, int]]) -> None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            path = f"{prefix}{k.value}"
            line = k.start_mark.line + 1
            if path in out:
                dups.append((path, out[path], line))
            out[path] = line
            _key_lines(v, path + ".", out, dups)


# A config file is a few hundred lines; caps keep a pasted data file or an alias bomb
# ("billion laughs") from taking minutes and gigabytes before the user hears what is wrong.
MAX_CONFIG_BYTES = 1_000_000
MAX_YAML_NODES = 100_000  # scalars, lists and mappings after expanding every alias


def _expanded_size(root: yaml.Node, name: str) -> None:
    """Raise ConfigError when the document, with every alias expanded, exceeds MAX_YAML_NODES
    (or an alias refers to its own ancestor); counted without expanding anything."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise ConfigError([Problem("(yaml)", f"{name}:{node.start_mark.line + 1}",
                                       "a YAML alias refers to a node that contains it (recursive alias)")])
        on_path.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child)
                if total > MAX_YAML_NODES:
                    break
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += size(k) + size(v)
                if total > MAX_YAML_NODES:
                    break
        on_path.discard(key)
        sizes[key] = total
        return total

    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 20_000))
    try:
        total = size(root)
    except RecursionError:
        total = MAX_YAML_NODES + 1
    finally:
        sys.setrecursionlimit(old_limit)
    if total > MAX_YAML_NODES:
        raise ConfigError([Problem("(yaml)", name, f"the document expands to more than {MAX_YAML_NODES:,} values "
                                   "once its aliases (*name) are expanded (or nests too deeply); a config needs far "
                                   "fewer: check the anchors (&name) and aliases")])


# libyaml's composer recurses in C and overflows the stack (a crash, not a RecursionError) somewhere
# past 10,000 levels; a document that might nest this deep goes to the Python parser.
C_PARSER_MAX_DEPTH = 2_000


def _may_nest_deeper(text: str, depth: int) -> bool:
    """An upper bound on the nesting of a YAML text exceeds `depth`: each level is a `[` or `{`, or
    (block style) a deeper column than its parent, at most two levels per column."""
    bound = text.count("[") + text.count("{")
    if bound > depth:
        return True
    return bound + 2 * (max(map(len, text.splitlines()), default=0) + 1) > depth


def _compose_yaml(text: str, name: str) -> tuple[yaml.Node | None, Any]:
    """Parse YAML text into (node, data), refusing alias bombs before anything is built."""
    if _CLoader is not None and not _may_nest_deeper(text, C_PARSER_MAX_DEPTH):
        try:
            return _compose_with(_CLoader, text, name)
        except yaml.YAMLError:
            pass  # the Python parser reports it, in its own words and with its line, as it always has
    return _compose_with(_Loader, text, name)


def _compose_with(loader_cls: type, text: str, name: str) -> tuple[yaml.Node | None, Any]:
    loader = loader_cls(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _expanded_size(node, name)
        data = loader.construct_document(node) if node is not None else None
    except RecursionError:
        raise ConfigError([Problem("(yaml)", name, "the document nests too deeply to be a config")]) from None
    finally:
        loader.dispose()
    return node, data


def parse_yaml_text(text: str, name: str = CLI_LAYER) -> Any:
    return _compose_yaml(text, name)[1]


def read_yaml_file(path: Path, name: str) -> tuple[yaml.Node | None, Any]:
    """(node, data) of a YAML file within the size and alias caps; every failure a ConfigError naming
    the file (and line for syntax errors)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConfigError([Problem("(file)", name, f"cannot read the file: {exc.strerror or exc}")]) from None
    if size > MAX_CONFIG_BYTES:
        raise ConfigError([Problem("(file)", name, f"config file is {size / 1e6:.1f} MB; rlft reads config files of "
                                   f"at most {MAX_CONFIG_BYTES / 1e6:g} MB (data belongs in a file named by "
                                   "data.train)")])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise ConfigError([Problem("(file)", name, f"cannot read the file as UTF-8 text: {exc}")]) from None
    try:
        return _compose_yaml(text, name)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark else name
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([Problem("(yaml)", where, f"YAML syntax error: {reason}")]) from None


def load_layer(path: Path, name: str | None = None) -> Layer:
    """Read one YAML file into a Layer; syntax errors name the file and line."""
    path = Path(path)
    name = name or display_path(path)
    if not path.is_file():
        what = "is a directory, not a config file" if path.is_dir() else "config file not found"
        raise ConfigError([Problem(name, name, f"{what}: {path}")])
    node, data = read_yaml_file(path, name)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([Problem("(yaml)", name, "a config file must be a mapping of sections, got "
                                                   f"{type(data).__name__}")])
    lines: dict[str, int] = {}
    dups: list[tuple[str, int, int]] = []
    _key_lines(node, "", lines, dups)
    if dups:
        raise ConfigError([Problem(key, f"{name}:{line}", f"duplicate key (also set on line {first}); "
                                   "YAML would silently keep only the last one") for key, first, line in dups])
    return Layer(name, data, lines, source_dir=path.resolve().parent)


# the layer rlft writes beside a run's config.yaml from it (rlft/posttrain/config_layer.py): a problem in it is the
# run's config.yaml's, named with its line there, never the hidden file the user did not write
RUN_CONFIG_LAYER = ".rlft-eval-config.yaml"


def _run_config_layer(path: Path) -> Layer:
    real = path.parent / run_files.CONFIG
    layer = load_layer(path, name=display_path(real))
    try:
        layer.lines = load_layer(real).lines  # the same keys (a subset of config.yaml), at their lines there
    except ConfigError:
        layer.lines = {}
    return layer


def parse_overrides(overrides: Iterable[str]) -> Layer:
    """KEY=VALUE pairs (values parsed as YAML, like OmegaConf's dotlist) into one layer."""
    data: dict = {}
    problems = []
    for item in overrides:
        if "=" not in item:
            problems.append(Problem(item, CLI_LAYER, "override must look like KEY=VALUE (e.g. "
                                                     "train.learning_rate=1e-5)"))
            continue
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or "" in key.split("."):
            problems.append(Problem(item, CLI_LAYER, "override must look like KEY=VALUE with a dotted key (e.g. "
                                                     "train.learning_rate=1e-5)"))
            continue
        try:
            value = parse_yaml_text(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                problems.append(Problem(key, CLI_LAYER, "conflicts with another override of its parent"))
                break
        else:
            node[parts[-1]] = value
    if problems:
        raise ConfigError(problems)
    return Layer(CLI_LAYER, data)


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dict -> {dotted path: leaf}; lists are leaves."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out[path] = v  # the section itself, so an unknown section is reported once
            out.update(flatten(v, path + "."))
        else:
            out[path] = v
    return out


@dataclass
class Composed:
    """The merged config plus where each key came from."""
    data: dict
    layers: list[Layer]
    stage: str
    hw: str
    profile_layers: int = 3  # base, stage and hardware profiles come first; later layers are the user's
    pending: tuple[str, ...] = ()  # folders an earlier pipeline stage writes, not there yet (checked once they are)

    def set_by_user(self, path: str) -> bool:
        """Whether a layer after rlft's own profiles set `path` (a user file, pipeline entry or override)."""
        return any(path in layer.flat for layer in self.layers[self.profile_layers:])

    def layer_of(self, path: str) -> str:
        """The layer (with line) that last set `path`, or 'default' when no layer set it.

        A layer that set an ancestor of `path` to a non-mapping value (a list such as `rewards`
        for `rewards[0].fn`, or a scalar where a section belongs) counts as having set `path`;
        a layer that merely has the enclosing section does not.
        """
        ancestors = []
        probe = path
        while True:
            cut = max(probe.rfind("."), probe.rfind("["))
            if cut <= 0:
                break
            probe = probe[:cut]
            ancestors.append(probe)
        for layer in reversed(self.layers):
            if path in layer.flat:
                return layer.where(path)
            for parent in ancestors:
                if parent in layer.flat and not isinstance(layer.flat[parent], dict):
                    return layer.where(parent)
        return "default"


    def dir_of(self, path: str) -> Path | None:
        """The folder of the config file that last set `path` (None: command line or default).
        Relative names in that value (e.g. a reward's `module:function`) are looked up there first."""
        for layer in reversed(self.layers):
            if path in layer.flat:
                return layer.source_dir
        return None


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _choose(kind: str, value: str, valid: tuple[str, ...]) -> Problem | None:
    if value in valid:
        return None
    import difflib
    close = difflib.get_close_matches(value, valid, n=1)
    hint = f"; did you mean `{close[0]}`?" if close else ""
    return Problem(f"--{kind}", CLI_LAYER, f"unknown {kind} `{value}`{hint or '.'} Valid: {', '.join(valid)}")


def compose(stage: str, hw: str, files: Iterable[str | Path] = (), overrides: Iterable[str] = (), *,
            before_files: Iterable[Layer] = (), after_files: Iterable[Layer] = (),
            last: Iterable[Layer] = ()) -> Composed:
    """Load and merge all layers. Raises ConfigError listing every problem found while loading.

    Order: base < stage profile < hardware profile < `before_files` < each file < `after_files` <
    overrides < `last` (the extra layers are in-memory ones, e.g. a pipeline's defaults and entries)."""
    problems = [p for p in (_choose("stage", stage, STAGES), _choose("hw", hw, HARDWARE)) if p]
    if problems:
        raise ConfigError(problems)
    root = configs_dir()
    paths = [root / "base.yaml", root / "stages" / f"{stage}.yaml", root / "hw" / f"{hw}.yaml", *map(Path, files)]
    layers: list[Layer] = []
    for i, path in enumerate(paths):
        try:
            layer = _run_config_layer(Path(path)) if Path(path).name == RUN_CONFIG_LAYER else load_layer(path)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        layer.profile = i < 3  # base, stage and hardware profiles come first
        anchor_paths(layer.data, Path(path).resolve().parent)
        layers.append(layer)
        if len(layers) == 3:  # after the three profiles
            layers.extend(before_files)
    layers.extend(after_files)
    try:
        layers.append(parse_overrides(overrides))
    except ConfigError as exc:
        problems.extend(exc.problems)
    layers.extend(last)
    if problems:
        raise ConfigError(problems)
    merged: dict = {}
    for layer in layers:
        merged = _merge(merged, layer.data)
    composed = Composed(merged, layers, stage, hw)
    _refuse_resolvers(layers)
    composed.data = _resolve_interpolations(composed)
    return composed


# keys whose relative value names a local file or folder: resolved against the config file naming it
_PATH_KEYS = (("data", "train"), ("data", "eval"))
_MODEL_PATH_KEYS = (("model", "name_or_path"), ("model", "ref"))


def _anchored(value: str, base_dir: Path) -> str:
    # A path that exists only relative to the working directory keeps that meaning (older configs).
    if not (base_dir / os.path.expanduser(value)).exists() and os.path.exists(os.path.expanduser(value)):
        return value
    target = os.path.normpath(base_dir / os.path.expanduser(value))
    rel = os.path.relpath(target)
    return target if rel.startswith("..") else rel


def anchor_paths(data: dict, base_dir: Path) -> None:
    """Relative paths in a config file mean "next to this file", wherever rlft is started from.

    Data files and reward files (`path/to/file.py:fn`) resolve against the file's folder (unless the
    path exists only relative to the working directory);
    `model.name_or_path`/`model.ref` only when they look local (`./x`, `../x`) or exist there, so a
    hub id such as `org/model` stays a hub id. Values set on the command line stay relative to the
    working directory.
    """
    def local(v) -> bool:
        return isinstance(v, str) and v and not os.path.isabs(os.path.expanduser(v)) and "${" not in v

    for section, key in _PATH_KEYS:
        node = data.get(section)
        if isinstance(node, dict) and local(node.get(key)) and node[key] != "demo":
            node[key] = _anchored(node[key], base_dir)
    for section, key in _MODEL_PATH_KEYS:
        node = data.get(section)
        if isinstance(node, dict) and local(node.get(key)) and node[key] not in ("tiny", "base", "init"):
            v = node[key]
            if v.startswith(("./", "../", "~")) or (base_dir / v).exists():
                node[key] = _anchored(v, base_dir)
    eval_section = data.get("eval")
    eval_rewards = eval_section.get("rewards") if isinstance(eval_section, dict) else None
    for rewards in (data.get("rewards"), eval_rewards):  # eval-only rewards name their files alike
        if not isinstance(rewards, list):
            continue
        for item in rewards:
            if isinstance(item, dict) and local(item.get("fn")):
                module, sep, fn = item["fn"].rpartition(":")
                if sep and (module.endswith(".py") or "/" in module) and local(module):
                    item["fn"] = f"{_anchored(module, base_dir)}:{fn}"
    env = data.get("env")
    if isinstance(env, dict) and local(env.get("name")):  # `path/to/env.py:Class`, as reward files
        module, sep, cls = env["name"].rpartition(":")
        if sep and (module.endswith(".py") or "/" in module) and local(module):
            env["name"] = f"{_anchored(module, base_dir)}:{cls}"


def _resolve_interpolations(composed: Composed) -> dict:
    """Resolve OmegaConf `${a.b}` interpolations in every layer (only when one is used: keeps start-up
    light), except in `rewards[].kwargs`: those are the reward function's own arguments (templates such as
    `Answer: ${answer}`, regexes) and reach it exactly as written, `$` and backslashes included."""
    data = composed.data
    if "${" not in repr(data):
        return data
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    data, verbatim = _without_reward_kwargs(data)
    if "${" not in repr(data):
        return composed.data
    try:
        resolved = OmegaConf.to_container(OmegaConf.create(data), resolve=True)
    except OmegaConfBaseException as exc:
        key = str(getattr(exc, "full_key", "") or "")
        raise ConfigError([Problem(key or "(interpolation)", composed.layer_of(key) if key else "config",
                                   _interpolation_message(exc, _value_at(data, key)))]) from None
    for i, kwargs in verbatim.items():
        resolved["rewards"][i]["kwargs"] = kwargs  # type: ignore[index]
    return resolved  # type: ignore[return-value]


def _without_reward_kwargs(data: dict) -> tuple[dict, dict[int, Any]]:
    """`data` less each `rewards[i].kwargs` (never interpolated), and those kwargs by i."""
    verbatim: dict[int, Any] = {}
    rewards = data.get("rewards")
    if isinstance(rewards, list):
        for i, item in enumerate(rewards):
            if isinstance(item, dict) and "kwargs" in item:
                verbatim[i] = item["kwargs"]
        data = {**data, "rewards": [{k: v for k, v in item.items() if k != "kwargs"} if i in verbatim else item
                                    for i, item in enumerate(rewards)]}
    return data, verbatim


def _refuse_resolvers(layers: list[Layer]) -> None:
    """Every OmegaConf resolver in any layer (even one a later layer overrides) is a ConfigError: only
    `${a.b}` key interpolation resolves, so no environment value can enter a config."""
    problems = []
    for layer in layers:
        if "${" not in repr(layer.data):
            continue
        for key, name in _resolver_calls(_without_reward_kwargs(layer.data)[0]):
            line_key = key
            while line_key not in layer.lines and re.search(r"[.\[]", line_key):  # `rewards[0].name` -> `rewards`
                line_key = line_key[:max(line_key.rfind("."), line_key.rfind("["))]
            problems.append(Problem(key, layer.where(line_key), _resolver_message(name)))
    if problems:
        raise ConfigError(problems)


def _strings(node: Any, path: str = "") -> Iterable[tuple[str, str]]:
    """(OmegaConf full key such as `rewards[0].name`, value) of every string holding `${`."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")
    elif isinstance(node, str) and "${" in node:
        yield path, node


def _resolver_calls(data: dict) -> list[tuple[str, str]]:
    """(key, resolver name) of each `${name:...}` resolver call, found with OmegaConf's own grammar, so
    nested, quoted and escaped forms read exactly as OmegaConf would read them."""
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser
    from omegaconf.grammar_parser import parse

    found = []
    for key, value in _strings(data):
        try:
            tree = parse(value)
        except GrammarParseError:
            continue  # OmegaConf reports it, with the escape to use, when it resolves
        stack = [tree]
        while stack:
            node = stack.pop()
            if isinstance(node, OmegaConfGrammarParser.ResolverNameContext):
                found.append((key, node.getText()))
                break
            stack.extend(node.getChildren() if hasattr(node, "getChildren") else ())
    return found


def _resolver_message(name: str) -> str:
    # names the resolver only, never the value it would read
    return (f"`${{{name}:...}}` is an OmegaConf resolver; rlft interpolates config keys only (`${{a.b}}`), so "
            f"environment values and secrets cannot reach config.yaml, logs and the model card. Pass an environment "
            f"value through the shell on the command line instead (e.g. train.output_dir=$OUT); write `\\${{...}}` "
            f"for literal text")


def _value_at(data: Any, key: str) -> Any:
    """The raw value at an OmegaConf full key such as `rewards[0].name` (None when absent)."""
    node = data
    for part in re.findall(r"[^.\[\]]+", key):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def _interpolation_message(exc: Exception, value: Any) -> str:
    """What failed, and how to write the text literally when no config key was meant."""
    first = str(exc).splitlines()[0]
    text = f"interpolation failed: {first}. `${{a.b}}` in a config value refers to the config key a.b"
    refs = re.findall(r"(?<!\\)\$\{[^}]*\}", value) if isinstance(value, str) else []
    if refs:
        escaped = ", ".join(f"`\\{r}`" for r in dict.fromkeys(refs))
        text += f"; to keep {', '.join(f'`{r}`' for r in dict.fromkeys(refs))} as literal text write {escaped}"
    else:
        text += "; to keep `${...}` as literal text write `\\${...}`"
    return text + " (rewards[].kwargs are never interpolated)"
