"""A causal LM's shapes from its config.json, without loading weights or importing torch.

The config comes from a local model folder, the Hugging Face hub cache (no network), or, for `tiny`,
rlft's built-in model (its cache folder when built, else the builder's defaults). Every field read is checked
first by rlft.models.config_json (whole numbers in range, true/false flags): a bad one is a `DamagedConfig`
naming the file and the field. The cost of a shape's sums does not grow with its layer count: one layer is
computed and multiplied.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

from rlft.models.config_json import ConfigJsonError, check_flags, check_sizes, read_config_json


class ShapeError(ValueError):
    """No usable config.json; the message says where rlft looked."""


class DamagedConfig(ShapeError):
    """A config.json that is there but cannot be planned from (unreadable, not JSON, a field of the wrong type or out
    of range); the message is one line naming the file and the field."""


# model types whose transformers config class defaults tie_word_embeddings to False (PretrainedConfig: True)
UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "olmo2"}
# q/k/v carry a bias in these architectures whatever the config says
QKV_BIAS = {"qwen2", "qwen2_moe"}


@dataclass(frozen=True)
class ModelShape:
    """What `rlft plan` reads from a model's config.json."""
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    tied_embeddings: bool
    qkv_bias: bool = False
    num_experts: int = 1          # MoE: experts held per layer (all of them are in memory)
    experts_per_token: int = 1    # MoE: experts each token runs through (activations)
    source: str = ""              # where the config came from, for the report

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linears(self) -> dict[str, tuple[int, int, int]]:
        """Per layer: module name -> (in features, out features, copies per layer); MLP copies = experts."""
        h, i, e = self.hidden_size, self.intermediate_size, self.num_experts
        return {"q_proj": (h, self.q_dim, 1), "k_proj": (h, self.kv_dim, 1), "v_proj": (h, self.kv_dim, 1),
                "o_proj": (self.q_dim, h, 1), "gate_proj": (h, i, e), "up_proj": (h, i, e), "down_proj": (i, h, e)}

    def num_params(self) -> int:
        """All parameters: embeddings (+ an untied LM head), per layer the projections, their biases, two norms,
        a router for MoE; the final norm."""
        per_layer = sum(n_in * n_out * k for n_in, n_out, k in self.linears().values()) + 2 * self.hidden_size
        if self.qkv_bias:
            per_layer += self.q_dim + 2 * self.kv_dim
        if self.num_experts > 1:
            per_layer += self.hidden_size * self.num_experts
        head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.vocab_size * self.hidden_size + head + self.num_layers * per_layer + self.hidden_size

    def matrices(self) -> list[tuple[int, int, int]]:
        """(rows, cols, how many) of the weight matrices (vectors as (n, 1)), for optimizers whose state depends on
        shape: one layer's, counted num_layers times."""
        layers = self.num_layers
        out = [(self.vocab_size, self.hidden_size, 1 if self.tied_embeddings else 2)]
        out += [(n_out, n_in, k * layers) for n_in, n_out, k in self.linears().values()]
        return out + [(self.hidden_size, 1, 2 * layers + 1)]

    def lora(self, targets: list[str], r: int) -> tuple[int, list[tuple[int, int, int]], list[str], list[str]]:
        """(LoRA parameters, their matrices as (rows, cols, how many), adapted module names, target names this model
        lacks): each adapted linear of each layer gets A (r x in) and B (out x r)."""
        dims = self.linears()
        adapted = [t for t in targets if t in dims]
        missing = [t for t in targets if t not in dims]
        mats: list[tuple[int, int, int]] = []
        for t in adapted:
            n_in, n_out, k = dims[t]
            mats += [(r, n_in, k * self.num_layers), (n_out, r, k * self.num_layers)]
        return sum(a * b * n for a, b, n in mats), mats, adapted, missing


def _first(config: dict, *names, default=None):
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def shape_from_config(config: dict, source: str = "") -> ModelShape:
    """ModelShape from a config.json dict (a multimodal model's `text_config` when it has one); DamagedConfig
    naming `source` and the field when a size is not a whole number in range or a flag is not true/false."""
    where = source or "config.json"
    try:
        check_sizes(config, where)
        check_flags(config, where)
    except ConfigJsonError as exc:
        raise DamagedConfig(str(exc)) from None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    hidden = _first(text, "hidden_size", "n_embd", "d_model")
    layers = _first(text, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(text, "num_attention_heads", "n_head")
    vocab = _first(text, "vocab_size")
    if any(v is None for v in (hidden, layers, heads, vocab)):
        raise DamagedConfig(f"{where} lacks hidden_size, num_hidden_layers, num_attention_heads or vocab_size")
    if _first(text, "head_dim") is None and hidden < heads:
        raise DamagedConfig(f"{where}: hidden_size {hidden} is smaller than num_attention_heads {heads} and no "
                            f"head_dim is given (each head would be 0 wide)")
    experts = int(_first(text, "num_local_experts", "num_experts", "n_routed_experts", default=1) or 1)
    inter = _first(text, "moe_intermediate_size") if experts > 1 else None
    return ModelShape(
        model_type=model_type, vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads,
        num_kv_heads=int(_first(text, "num_key_value_heads", default=heads)),
        head_dim=int(_first(text, "head_dim", default=hidden // heads)),
        intermediate_size=int(inter or _first(text, "intermediate_size", "n_inner", default=4 * hidden)),
        tied_embeddings=bool(_first(text, "tie_word_embeddings", default=config.get(
            "tie_word_embeddings", model_type not in UNTIED_BY_DEFAULT))),
        qkv_bias=model_type in QKV_BIAS or bool(text.get("attention_bias")),
        num_experts=experts,
        experts_per_token=int(_first(text, "num_experts_per_tok", default=1)) if experts > 1 else 1,
        source=source)


def tiny_config(init_std: float) -> tuple[dict, str]:
    """rlft's tiny model: its built folder's config.json, else the one `rlft.tiny` would build."""
    from rlft.tiny import build_tiny_model, default_cache_dir, tiny_model_name

    built = default_cache_dir() / tiny_model_name(init_std=init_std) / "config.json"
    if built.is_file():
        try:
            return read_config_json(built), f"rlft's tiny model (built: {built})"
        except ConfigJsonError as exc:
            raise DamagedConfig(str(exc)) from None
    d = {k: p.default for k, p in inspect.signature(build_tiny_model).parameters.items()}
    # as rlft.tiny._build_config builds it: MLP width 2 x hidden, no grouped-query attention, tied embeddings
    return ({"model_type": d["arch"], "vocab_size": d["vocab_size"], "hidden_size": d["hidden_size"],
             "num_hidden_layers": d["num_layers"], "num_attention_heads": d["num_heads"],
             "num_key_value_heads": d["num_heads"], "intermediate_size": 2 * d["hidden_size"],
             "tie_word_embeddings": True}, "rlft's tiny model (not built yet: its default build)")


def hub_config(repo_id: str) -> Path | None:
    """config.json of a hub model already in the local cache (HF_HUB_CACHE / HF_HOME; no network)."""
    if repo_id.count("/") != 1:
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found) if isinstance(found, str) else None


def load_shape(name: str, tiny_init_std: float = 0.15) -> ModelShape:
    """The shape of model.name_or_path; ShapeError says where rlft looked."""
    if name == "tiny":
        config, source = tiny_config(tiny_init_std)
        return shape_from_config(config, source)
    local = Path(name).expanduser()
    path = local / "config.json" if local.is_dir() else hub_config(name)
    if path is None or not path.is_file():
        where = f"{local} has no config.json" if local.is_dir() else "not a local folder, not in the Hugging Face cache"
        raise ShapeError(f"no config.json for `{name}` ({where}); download it once (huggingface-cli download {name} "
                         f"config.json) or point model.name_or_path at a local model folder")
    try:
        config = read_config_json(path)
    except ConfigJsonError as exc:
        raise DamagedConfig(str(exc)) from None
    return shape_from_config(config, str(path))
