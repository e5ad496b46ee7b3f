"""A tiny, randomly initialised model of a real model's family, built offline from the real model's
config.json and tokenizer files (a local folder or the Hugging Face hub cache), for `--smoke` runs.

The tiny model keeps what decides whether a config works with the real model (architecture class, module
names that LoRA targets, vocabulary size, tokenizer, special tokens and chat template) and shrinks what
decides its cost: 2 layers, hidden size 64, 4 attention heads of 16 (grouped-query attention kept as 2
key/value heads, multi-query as 1), MLP width 128, at most 4 experts. It is built once per real config and
tokenizer (cached by their hash under rlft's cache, `$RLFT_CACHE/smoke-models/`), into a temporary folder
renamed into place, so concurrent builds never expose half a model. Importing this module imports no torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rlft.models.config_json import load_checked_config

FORMAT_VERSION = 1  # bumped when the recipe changes, so an older build is not reused
MARKER_FILE = "rlft_smoke_model.json"
CACHE_SUBDIR = "smoke-models"

# the files that make a tokenizer and its chat template (whichever of them the model ships)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model",
                   "chat_template.jinja", "chat_template.json")
VOCAB_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "tokenizer.model", "spiece.model")

LAYERS, HIDDEN, HEADS, MLP, EXPERTS, EXPERTS_PER_TOKEN = 2, 64, 4, 128, 4, 2


class FamilyError(Exception):
    """The real model's files cannot give a tiny model of its family; the message says why (one line)."""


@dataclass(frozen=True)
class ModelFiles:
    folder: Path   # holds config.json and the tokenizer files
    where: str     # "a local folder" or "the Hugging Face cache", for the smoke summary


def _hub_snapshot(repo_id: str) -> Path | None:
    """The hub cache's snapshot folder holding the repo's config.json (HF_HUB_CACHE / HF_HOME; no network)."""
    if repo_id.count("/") != 1:
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def find_model_files(name: str) -> tuple[ModelFiles | None, str]:
    """(the folder with the real model's config.json and tokenizer, or None; why not, in words)."""
    local = Path(name).expanduser()
    if local.is_dir():
        folder, where = local, "a local folder"
    else:
        folder, where = _hub_snapshot(name), "the Hugging Face cache"
        if folder is None:
            return None, "not a local folder and not in the Hugging Face cache"
    if not (folder / "config.json").is_file():
        return None, f"{folder} has no config.json"
    if not any((folder / f).is_file() for f in VOCAB_FILES):
        return None, f"{folder} has config.json but no tokenizer files ({', '.join(VOCAB_FILES)})"
    return ModelFiles(folder, where), ""


def fingerprint(folder: Path) -> str:
    """sha256 of config.json and the tokenizer files (names and bytes) plus the recipe version."""
    h = hashlib.sha256(f"rlft-smoke-model-v{FORMAT_VERSION}\n".encode())
    for name in ("config.json", *TOKENIZER_FILES):
        path = folder / name
        if path.is_file():
            h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _kv_heads(heads: int | None, kv: int | None) -> int:
    """Keep the attention kind: multi-head stays multi-head, grouped-query 2 groups, multi-query 1."""
    if kv is None or heads is None or kv >= heads:
        return HEADS
    return 1 if kv == 1 else 2


def shrink(config) -> dict:
    """Shrink a transformers config in place to the smoke size; returns {key: (was, now)} of what changed."""
    changed: dict = {}

    def put(key: str, value) -> None:
        if not hasattr(config, key):
            return
        old = getattr(config, key)
        if old is None and key not in ("num_key_value_heads",):
            return
        if old != value:
            setattr(config, key, value)
            changed[key] = (old, value)

    heads, kv = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    put("num_hidden_layers", LAYERS)
    put("hidden_size", HIDDEN)
    put("num_attention_heads", HEADS)
    if kv is not None:
        put("num_key_value_heads", _kv_heads(heads, kv))
    put("head_dim", HIDDEN // HEADS)
    for key in ("intermediate_size", "n_inner", "ffn_dim"):
        put(key, MLP)
    for key in ("moe_intermediate_size", "shared_expert_intermediate_size"):
        put(key, MLP // 2)
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if isinstance(getattr(config, key, None), int):
            put(key, min(getattr(config, key), EXPERTS))
    if isinstance(getattr(config, "num_experts_per_tok", None), int):
        put("num_experts_per_tok", min(config.num_experts_per_tok, EXPERTS_PER_TOKEN))
    for key in ("max_window_layers", "first_k_dense_replace"):
        if isinstance(getattr(config, key, None), int):
            put(key, min(getattr(config, key), LAYERS))
    if isinstance(getattr(config, "layer_types", None), list):  # one entry per layer (sliding/full attention)
        put("layer_types", list(config.layer_types[:LAYERS]))
    return changed


def tiny_config(folder: Path):
    """The real config.json through transformers, shrunk; FamilyError when transformers cannot build it."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError) as exc:  # unknown model_type, remote code needed, bad JSON
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FamilyError(f"transformers cannot read {folder / 'config.json'} ({why[:200]})") from None
    if getattr(config, "text_config", None) is not None and not hasattr(config, "num_hidden_layers"):
        raise FamilyError(f"{folder / 'config.json'} is a multimodal config ({config.model_type}); only causal LMs "
                          f"are rebuilt tiny")
    if not isinstance(getattr(config, "vocab_size", None), int):
        raise FamilyError(f"{folder / 'config.json'} has no vocab_size")
    changed = shrink(config)
    config.dtype = "float32"  # fp32 on CPU; the real config's bf16 would be cast anyway
    return config, changed


def _build(files: ModelFiles, out: Path) -> dict:
    """Build the model and tokenizer into `out`; the marker's contents."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    real = load_checked_config(files.folder / "config.json")
    config, changed = tiny_config(files.folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(files.folder))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FamilyError(f"the tokenizer in {files.folder} does not load ({type(exc).__name__}: "
                          f"{str(exc).strip()[:200]})") from None
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        with torch.no_grad():  # a config shrunk into an inconsistent shape fails here, not in the run
            model(input_ids=torch.tensor([[min(1, config.vocab_size - 1)] * 2]))
    except Exception as exc:  # noqa: BLE001 - any failure means: no tiny model of this family, use rlft's own
        raise FamilyError(f"transformers cannot build a 2-layer {type(config).__name__} from {files.folder} "
                          f"({type(exc).__name__}: "
                          f"{str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''})") from None
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a build inside a run: no progress bar between the run's lines
    try:
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return {"format_version": FORMAT_VERSION, "source": str(files.folder), "where": files.where,
            "architecture": type(model).__name__, "model_type": config.model_type,
            "vocab_size": config.vocab_size, "tokenizer_size": len(tokenizer),
            "chat_template": bool(getattr(tokenizer, "chat_template", None)),
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "real": {k: real.get(k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                                  "num_key_value_heads", "intermediate_size") if k in real},
            "shrunk": {k: [a, b] for k, (a, b) in changed.items()}}


def read_marker(folder: Path) -> dict | None:
    try:
        marker = json.loads((Path(folder) / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("format_version") == FORMAT_VERSION else None


def ensure_family_model(files: ModelFiles, cache_dir: Path | None = None) -> tuple[Path, dict]:
    """(the tiny model's folder, its marker), built once per real config + tokenizer; FamilyError when the
    family cannot be rebuilt tiny; ConfigJsonError when its config.json is damaged or holds a size out of range (the
    real run would fail on it too)."""
    from rlft.tiny import default_cache_dir

    real = load_checked_config(files.folder / "config.json")  # before anything is built (or reused) from it
    root = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / CACHE_SUBDIR
    key = fingerprint(files.folder)
    model_type = str(real.get("model_type") or "model")
    final = root / f"{''.join(c for c in model_type if c.isalnum() or c in '-_')[:40] or 'model'}-{key[:16]}"
    marker = read_marker(final)
    if marker is not None:
        return final, marker
    root.mkdir(parents=True, exist_ok=True)
    if final.exists():  # no marker: not a finished build (builds are renamed into place once complete)
        shutil.rmtree(final, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    try:
        marker = _build(files, tmp)
        (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
        try:
            os.rename(tmp, final)
        except OSError:  # a concurrent build won the rename
            if read_marker(final) is None:
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final, read_marker(final) or marker
