"""Offline builder of a tiny, randomly initialised causal LM.

The tiny model is what rlft's tests, examples and smoke runs train on: it is
built locally in a few seconds (no model hub needed), is deterministic for a
given set of arguments, and is saved with ``save_pretrained`` so that it loads
through the ordinary ``AutoModelForCausalLM`` / ``AutoTokenizer`` entry points.

It consists of

* a byte-level BPE tokenizer trained on a small built-in corpus, with the
  special tokens ``<|endoftext|>`` (eos), ``<|pad|>`` (pad), ``<|im_start|>``
  and ``<|im_end|>`` and a ChatML-like chat template;
* a Qwen2-style (or Llama-style) decoder with tied input/output embeddings
  (hidden 64, 2 layers, 4 heads, MLP width 2 x hidden by default).

Weight scale matters. With tied embeddings the largest logit the model can
produce is about ``hidden_size * init_std`` (the final RMSNorm fixes the norm
of the last hidden state at ``sqrt(hidden_size)``), and LoRA adapters leave
the embeddings frozen. At the usual ``initializer_range`` of 0.02 the logits
stay nearly uniform whatever LoRA does, so LoRA fine-tuning cannot learn. Too
large a scale hurts as well: the random residual stream then dwarfs what a
LoRA update adds, and learning stalls or collapses onto a partial solution.
Measured with stock TRL GRPO + LoRA on the demo task of :mod:`rlft.data.demo`
(``scripts/plain_trl_grpo_demo.py``: 60 steps, lr 3e-3, mean reward of the
last 10 steps): 0.02 does not learn (~0.03), 0.1 plateaus near 0.8, 0.15 and
0.2 reach 0.95-1.0 for most seeds, 0.3 stalls or collapses (0.4-0.7). The
default ``init_std`` is 0.15 (:data:`DEFAULT_INIT_STD`), the value that
learnt most reliably across target letters and seeds.

Importing this module does not import torch, transformers or tokenizers; they
are imported when a model is built.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_INIT_STD",
    "FORMAT_VERSION",
    "MARKER_FILE",
    "WRITTEN_NAMES",
    "SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "build_tiny_model",
    "ensure_tiny_model",
    "default_cache_dir",
    "tiny_model_name",
    "tiny_corpus",
]

#: Default standard deviation of the weight initialisation (see module doc).
DEFAULT_INIT_STD = 0.15

#: Bumped whenever the build recipe changes in a way that changes the output;
#: part of the cache folder name so that stale caches are not reused.
FORMAT_VERSION = 1

#: Name of the marker file written (last) into every built model folder.
MARKER_FILE = "rlft_tiny.json"

#: Every file name a build writes (transformers' model and tokenizer files, the marker): what
#: `rlft tiny-model` may replace when it rebuilds a folder; any other name there stops it.
WRITTEN_NAMES = (MARKER_FILE, "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja")

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

#: Special tokens, in id order (ids 0..3).
SPECIAL_TOKENS = (EOS_TOKEN, PAD_TOKEN, IM_START, IM_END)

#: ChatML-like chat template; honours ``add_generation_prompt``.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_ARCHS = ("qwen2", "llama")

_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)

_SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "A small model can learn a simple task with a few steps of training.",
    "Reinforcement learning rewards the model when the answer is right.",
    "Write the answer in one line, then stop.",
    "Please repeat the letter many times.",
    "Count from one to ten: one, two, three, four, five, six, seven, eight, nine, ten.",
    "What is the sum of two and three? The answer is five.",
    "She said: \"Hello, world!\" and he replied: 'Hi there.'",
    "Numbers like 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 10 are digits or made of digits.",
    "The user asks a question and the model gives an answer.",
    "Lists use commas, semicolons; colons: dashes - and (parentheses).",
    "Is it true? Yes, it is true. No, it is not false!",
    "Every good boy deserves fruit, and every cat likes milk.",
    "The rain in Spain stays mainly in the plain.",
    "Training data, reward functions and policies are configured in YAML files.",
    "Think step by step, then write the final answer after the word Answer.",
    "Answer: 42. Answer: yes. Answer: no. Answer: the letter a.",
    "Repeat after me: abc abc abc. Say it again: xyz xyz xyz.",
    "Math: 3 + 4 = 7, 12 - 5 = 7, 6 * 7 = 42, 81 / 9 = 9, 2 ^ 10 = 1024.",
    "Symbols: # $ % & * + - / < = > @ [ \\ ] ^ _ ` { | } ~ and more.",
)


def tiny_corpus() -> list[str]:
    """The built-in, deterministic tokenizer training corpus (a list of lines)."""
    lines: list[str] = []
    for _ in range(3):
        lines.extend(_SENTENCES)
    letters = "abcdefghijklmnopqrstuvwxyz"
    for alphabet in (letters, letters.upper()):
        lines.append(" ".join(alphabet))
        lines.append(alphabet)
    # Runs of repeated lowercase letters, with and without a leading space, so
    # that e.g. "q", "qq", "qqqq", " q", " qq", " qqqq" are tokens. They give each
    # letter a family of tokens, which makes "repeat a letter" (rlft.data.demo)
    # learnable from a random init.
    for ch in letters:
        lines.append(" ".join(ch * n for n in (1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8)))
        lines.append(" ".join([ch * 8] * 6))
        lines.append(ch * 16)
    lines.append("0123456789 " * 4)
    lines.append(" ".join(str(i) for i in range(200)))
    # small arithmetic facts (deterministic)
    for a in range(0, 20):
        for b in (1, 3, 7, 11):
            lines.append(f"{a} + {b} = {a + b}. {a} * {b} = {a * b}.")
    lines.append("., ; : ! ? ' \" ( ) [ ] { } - _ + = * / \\ | < > @ # $ % ^ & ~ `")
    lines.append("\n".join(_SENTENCES[:5]))
    lines.append(f"{IM_START}user\nRepeat the letter a.{IM_END}\n{IM_START}assistant\naaaa{IM_END}\n")
    return lines


# build_tiny_model's keyword defaults, which name its cache folder (tests/test_tiny.py holds the two equal)
BUILD_DEFAULTS: dict[str, Any] = dict(hidden_size=64, num_layers=2, num_heads=4, vocab_size=512,
                                      init_std=DEFAULT_INIT_STD, seed=0, arch="qwen2")


def tiny_model_name(**build_args: Any) -> str:
    """Cache folder name for `build_tiny_model`'s keyword arguments (its defaults for the rest), e.g.
    ``tiny-qwen2-h64-l2-a4-voc512-std0.15-s0-v1-1a2b3c4d``.

    The last part hashes this module's source, so an edited recipe (corpus, config) never reuses a
    model cached by an earlier one."""
    import zlib  # not hashlib: loading OpenSSL would cost every `validate-config` of a tiny config a few ms

    defaults = BUILD_DEFAULTS
    unknown = set(build_args) - set(defaults)
    if unknown:
        raise TypeError(f"tiny_model_name() got unexpected arguments: {', '.join(sorted(unknown))}")
    a = {**defaults, **build_args}
    recipe = f"{zlib.crc32(Path(__file__).read_bytes()):08x}"
    return (
        f"tiny-{a['arch']}-h{a['hidden_size']}-l{a['num_layers']}-a{a['num_heads']}-voc{a['vocab_size']}"
        f"-std{float(a['init_std']):g}-s{a['seed']}-v{FORMAT_VERSION}-{recipe}"
    )


def default_cache_dir() -> Path:
    """``$RLFT_CACHE`` if set, else ``~/.cache/rlft``."""
    env = os.environ.get("RLFT_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "rlft"


def _check_args(hidden_size: int, num_layers: int, num_heads: int, vocab_size: int, init_std: float, arch: str) -> None:
    if arch not in _ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(_ARCHS)}")
    if hidden_size <= 0 or num_layers <= 0 or num_heads <= 0:
        raise ValueError("hidden_size, num_layers and num_heads must be positive")
    if hidden_size % num_heads != 0:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})")
    if (hidden_size // num_heads) % 2 != 0:
        raise ValueError("hidden_size // num_heads must be even (rotary embeddings)")
    min_vocab = 256 + len(SPECIAL_TOKENS)
    if vocab_size < min_vocab:
        raise ValueError(f"vocab_size must be at least {min_vocab} (byte alphabet + special tokens)")
    if not init_std > 0:
        raise ValueError("init_std must be positive")


def _build_tokenizer(vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Same normalizer / pre-tokenizer as Qwen2's tokenizer: ``AutoTokenizer``
    # rebuilds a Qwen2 tokenizer from vocab + merges with these, so using them
    # here makes the saved tokenizer round-trip exactly.
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tiny_corpus(), trainer=trainer)

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=512,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _build_config(arch: str, *, vocab_size: int, hidden_size: int, num_layers: int, num_heads: int,
                  init_std: float, pad_id: int, eos_id: int):
    common: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        hidden_act="silu",
        max_position_embeddings=512,
        initializer_range=init_std,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        use_cache=True,
        pad_token_id=pad_id,
        bos_token_id=None,
        eos_token_id=eos_id,
    )
    if arch == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common)
    from transformers import LlamaConfig

    return LlamaConfig(**common)


def build_tiny_model(
    out_dir: str | os.PathLike[str],
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    vocab_size: int = 512,
    init_std: float = DEFAULT_INIT_STD,
    seed: int = 0,
    arch: str = "qwen2",
) -> Path:
    """Build a tiny causal LM + tokenizer into ``out_dir`` and return its path.

    Deterministic: the same arguments give the same tokenizer and weights.
    The folder can be loaded with ``AutoModelForCausalLM.from_pretrained`` and
    ``AutoTokenizer.from_pretrained``; it also holds :data:`MARKER_FILE`
    with the build arguments.
    """
    _check_args(hidden_size, num_layers, num_heads, vocab_size, init_std, arch)

    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = _build_tokenizer(vocab_size)
    # The trainer may stop short of vocab_size on a small corpus; the embedding
    # table always has vocab_size rows so that the shape is predictable.
    model_vocab = max(vocab_size, len(tokenizer))
    config = _build_config(
        arch,
        vocab_size=model_vocab,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        init_std=float(init_std),
        pad_id=tokenizer.pad_token_id,
        eos_id=tokenizer.eos_token_id,
    )

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    finally:
        if bars:
            hf_logging.enable_progress_bar()

    marker = {
        "format_version": FORMAT_VERSION,
        "arch": arch,
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "vocab_size": vocab_size,
        "init_std": float(init_std),
        "seed": seed,
        "tokenizer_size": len(tokenizer),
        "num_parameters": sum(p.numel() for p in model.parameters()),
    }
    (out / MARKER_FILE).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
    return out


def _is_complete(path: Path) -> bool:
    try:
        marker = json.loads((path / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("format_version") == FORMAT_VERSION


def ensure_tiny_model(cache_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> Path:
    """Return the folder of a tiny model built with ``kwargs``, building it once.

    The model lives in ``cache_dir`` (default :func:`default_cache_dir`) under
    :func:`tiny_model_name`. It is built into a temporary folder next to its
    final place and renamed into place, so concurrent callers never see a
    half-written model; if two processes build at once, one rename wins and
    the other build is discarded.
    """
    unknown = set(kwargs) - {"hidden_size", "num_layers", "num_heads", "vocab_size", "init_std", "seed", "arch"}
    if unknown:
        raise TypeError(f"ensure_tiny_model() got unexpected arguments: {', '.join(sorted(unknown))}")
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    final = root / tiny_model_name(**kwargs)
    if _is_complete(final):
        return final

    root.mkdir(parents=True, exist_ok=True)
    if final.exists():
        # A folder without a valid marker was not produced by a finished build
        # (builds are renamed into place only when complete): replace it.
        shutil.rmtree(final, ignore_errors=True)
    import tempfile  # here: it imports random (hashlib's sha512), a cost to every `rlft validate-config`

    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    try:
        build_tiny_model(tmp, **kwargs)
        try:
            os.rename(tmp, final)
        except OSError:
            # Lost the race to a concurrent build (the target exists and is not empty).
            if not _is_complete(final):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
