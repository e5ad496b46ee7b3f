"""A model folder's config.json read without torch or transformers, and the sizes in it checked before anything is
built from them: each one a whole number (not a bool, not a float, not NaN), positive, and below a bound no real
causal LM comes near. `--smoke` builds its tiny model of the family from this file (rlft.models.tiny_family), so a
`vocab_size: 1000000000` would otherwise become a 256 GB "tiny" model; `rlft plan` reads the same fields (and
checks its true/false ones, FLAG_FIELDS, with check_flags).

Standard library only. Errors are one line naming the file and the field (`ConfigJsonError`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# field -> (least, most) allowed. The upper bounds are far above any released model (vocabularies reach ~262k,
# hidden sizes ~25k, context ~10M positions) and far below what would exhaust memory when a tiny model keeps the
# field as it is (vocab_size and the position counts are not shrunk).
SIZE_FIELDS: dict[str, tuple[int, int]] = {
    "vocab_size": (1, 2**20),
    "hidden_size": (1, 2**17), "n_embd": (1, 2**17), "d_model": (1, 2**17),
    "num_hidden_layers": (1, 2**12), "n_layer": (1, 2**12), "num_layers": (1, 2**12),
    "num_attention_heads": (1, 2**12), "n_head": (1, 2**12),
    "num_key_value_heads": (1, 2**12),
    "head_dim": (1, 2**14),
    "intermediate_size": (1, 2**20), "n_inner": (1, 2**20), "ffn_dim": (1, 2**20),
    "moe_intermediate_size": (1, 2**20), "shared_expert_intermediate_size": (1, 2**20),
    "num_experts": (1, 2**16), "num_local_experts": (1, 2**16), "n_routed_experts": (1, 2**16),
    "num_experts_per_tok": (1, 2**10),
    "max_window_layers": (0, 2**12), "first_k_dense_replace": (0, 2**12),
    "max_position_embeddings": (1, 2**24), "n_positions": (1, 2**24), "n_ctx": (1, 2**24),
}


# fields read as true/false (`rlft plan`: tied embeddings, q/k/v bias): a JSON boolean or null, never "false" or 0
FLAG_FIELDS = ("tie_word_embeddings", "attention_bias")


class ConfigJsonError(Exception):
    """A model's config.json that cannot be used (unreadable, not a JSON object, or a size out of range); the message
    is one line naming the file (and the field)."""


def read_config_json(path: Path) -> dict:
    """The JSON object in `path`; ConfigJsonError naming the file when it is unreadable, cut short or not an object."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigJsonError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigJsonError(f"{path} is damaged: nested too deep to be a model's settings") from None
    except ValueError as exc:  # json.JSONDecodeError; also a number too long to convert
        where = f": line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigJsonError(f"{path} is damaged: not valid JSON ({getattr(exc, 'msg', exc)}{where}); restore it "
                              f"from the model's source") from None
    if not isinstance(data, dict):
        raise ConfigJsonError(f"{path} is damaged: expected a JSON object of model settings, got "
                              f"{_kind(data)}")
    return data


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def size_problem(key: str, value: Any) -> str | None:
    """What is wrong with one size field's value (None: fine, or not a size field, or left null)."""
    if key not in SIZE_FIELDS or value is None:
        return None
    least, most = SIZE_FIELDS[key]
    expected = f"expected an integer between {least} and {most}"
    if isinstance(value, bool) or not isinstance(value, int):
        shown = json.dumps(value) if isinstance(value, (str, float, bool)) else _kind(value)
        return f"{key} is {shown}, not a whole number; {expected}"
    if not least <= value <= most:
        return f"{key} {value} is out of range; {expected}"
    return None


def flag_problem(key: str, value: Any) -> str | None:
    """What is wrong with one true/false field's value (None: fine, not a flag field, or left null)."""
    if key not in FLAG_FIELDS or value is None or isinstance(value, bool):
        return None
    shown = json.dumps(value) if isinstance(value, (str, int, float)) else _kind(value)
    return f"{key} is {shown}, not a JSON boolean; expected true, false or null"


def _sections(config: dict):
    """("", the config) and ("text_config.", a multimodal model's text settings) when it has them."""
    for prefix, section in (("", config), ("text_config.", config.get("text_config"))):
        if isinstance(section, dict):
            yield prefix, section


def check_flags(config: dict, path: Path | str) -> None:
    """ConfigJsonError naming the file and the first FLAG_FIELDS field that is neither a boolean nor null."""
    for prefix, section in _sections(config):
        for key, value in section.items():
            problem = flag_problem(key, value)
            if problem:
                raise ConfigJsonError(f"{path}: {prefix}{problem}")


def check_sizes(config: dict, path: Path | str) -> None:
    """ConfigJsonError naming the file and the first size field (top level, or under a multimodal model's
    `text_config`) that is not a whole number in its range."""
    for prefix, section in _sections(config):
        for key, value in section.items():
            problem = size_problem(key, value)
            if problem:
                raise ConfigJsonError(f"{path}: {prefix}{problem}")


def load_checked_config(path: Path) -> dict:
    """read_config_json + check_sizes: the config.json a tiny model (or a memory plan) may be built from."""
    config = read_config_json(path)
    check_sizes(config, path)
    return config
