"""The training data's token lengths, for planning from the data rather than the config's limits.

- rows: `demo` (rlft's built-in prompts, as the run builds them) or a local file (`rlft.data.peek`: jsonl,
  json, csv, parquet, a saved datasets folder); the first `MAX_ROWS` of them at most (data.max_samples caps
  them as it caps the run);
- rendered as the run renders them (`data.system_prompt`, `data.chat_template`: `rlft.data.chat`'s rules),
  and for preference pairs as TRL tokenizes them (the answer is what prompt + answer adds to the prompt);
- counted with the model's tokenizer.json through the `tokenizers` library and its chat template through
  jinja2's sandbox (as transformers renders it): neither imports torch or transformers. Without a
  tokenizer.json on this machine the counts are an estimate, `CHARS_PER_TOKEN` characters per token.

The profiles (`rlft.config.stagespec.DataLengths`) take the longest row, capped by the config's limits.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlft import run_files
from rlft.config.stages import get_spec
from rlft.config.stagespec import PREFERENCE_COLUMNS, DataLengths

MAX_ROWS = 2000       # rows read and tokenized at most: enough for the longest of a typical set, in ~0.1 s
CHARS_PER_TOKEN = 4   # the estimate without a tokenizer: a usual ratio for English under a BPE vocabulary
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@dataclass(frozen=True)
class DataBasis:
    """What a data-based plan read: the lengths, and in words how they were counted (for the report)."""
    lengths: DataLengths
    source: str          # data.train
    rows: int            # rows read
    total: int | None    # rows in the data (None: unknown)
    tokenizer: bool      # counted with the model's tokenizer (else estimated from characters)
    counted: str         # how, in words
    template: str        # what the chat template did, in words

    @property
    def sampled(self) -> bool:
        return self.total is None or self.rows < self.total

    def describe(self) -> str:
        rows = f"the first {self.rows:,} of {self.total:,} rows" if self.total and self.sampled else \
            f"{self.rows:,} rows"
        longest = f"longest prompt {max(self.lengths.prompts)} tokens"
        if self.lengths.answers:
            longest += f", longest answer {max(self.lengths.answers)}"
        return f"{self.source}: {longest} (max of {rows}; {self.counted}; {self.template})"


# ---- the model's tokenizer, without transformers


# one row's render through the chat template: at most this many items of its `range` loops, and this long
RENDER_ITERATIONS = 1_000_000
RENDER_SECONDS = 5.0
# a prompt's text is cut to train.max_seq_length x this many characters before rendering and tokenising
CUT_CHARS_PER_TOKEN = 16

@dataclass
class TokenCounter:
    """Token counts of texts, and the chat template that renders messages (None: unknown or none)."""
    tokenizer: Any               # tokenizers.Tokenizer, or None: estimate from characters
    template: Any                # a compiled jinja2 template, or None
    has_template: bool | None    # whether the model has a chat template (None: not known on this machine)
    special: dict[str, str]      # bos_token, eos_token, ... as the template reads them
    counted: str
    template_kwargs: dict = field(default_factory=dict)  # data.chat_template_kwargs, as the run renders with them

    def encode(self, texts: list[str], special_tokens: bool) -> list[list]:
        """Tokens of each text; `special_tokens` adds the tokenizer's own (a BOS), as tokenizing plain text does
        and rendered chat templates do not (they carry theirs). The estimate's tokens are runs of
        CHARS_PER_TOKEN characters."""
        if not texts:
            return []
        if self.tokenizer is None:
            return [[t[i:i + CHARS_PER_TOKEN] for i in range(0, len(t), CHARS_PER_TOKEN)] for t in texts]
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=special_tokens)]

    def count(self, texts: list[str], special_tokens: bool) -> list[int]:
        return [len(t) for t in self.encode(texts, special_tokens)]

    def render(self, messages: list, generation_prompt: bool) -> str:
        budget = getattr(self.template, "rlft_budget", None)
        if budget is not None:  # per row (compile_template)
            budget.update(left=RENDER_ITERATIONS, until=time.monotonic() + RENDER_SECONDS)
        return self.template.render(**{**self.special, **self.template_kwargs}, messages=messages,
                                    add_generation_prompt=generation_prompt)


def _read_json(path: Path | None) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def tokenizer_files(cfg) -> tuple[dict[str, Path], str]:
    """({file name: path} of the model's tokenizer files on this machine, where they were looked for): the
    init_from run's final/ folder, rlft's built tiny model, a local folder, or the Hugging Face cache."""
    name = cfg.model.name_or_path
    if cfg.model.init_from:
        from rlft.config.init_from import run_root

        folder: Path | None = run_root(cfg.model.init_from) / run_files.FINAL
    elif name == "tiny":
        from rlft.tiny import default_cache_dir, tiny_model_name

        folder = default_cache_dir() / tiny_model_name(init_std=cfg.model.tiny_init_std)
    else:
        folder = Path(name).expanduser()
    if folder is not None and folder.is_dir():
        return {f: folder / f for f in TOKENIZER_FILES if (folder / f).is_file()}, str(folder)
    if name == "tiny":
        return {}, "rlft's tiny model (not built yet: the first run builds it)"
    if name.count("/") != 1:
        return {}, str(folder)
    from huggingface_hub import try_to_load_from_cache

    found = {f: try_to_load_from_cache(name, f) for f in TOKENIZER_FILES}
    return {f: Path(p) for f, p in found.items() if isinstance(p, str)}, f"the Hugging Face cache ({name})"


def _template_source(files: dict[str, Path], config: dict) -> str | None:
    """The chat template as transformers finds it: chat_template.jinja, else tokenizer_config.json's
    `chat_template` (a string, or a list of named templates: the `default` one)."""
    if "chat_template.jinja" in files:
        try:
            return files["chat_template.jinja"].read_text(encoding="utf-8")
        except OSError:
            return None
    found = config.get("chat_template")
    if isinstance(found, list):
        found = next((t.get("template") for t in found if isinstance(t, dict) and t.get("name") == "default"), None)
    return found if isinstance(found, str) else None


def _special_tokens(config: dict) -> dict[str, str]:
    """tokenizer_config.json's `*_token` entries (strings or {"content": ...}), which templates read."""
    out = {}
    for key, value in config.items():
        if key.endswith("_token"):
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str):
                out[key] = value
    return out


def compile_template(source: str):
    """A chat template compiled as transformers compiles it (sandboxed, trim_blocks, lstrip_blocks, loop
    controls, its `raise_exception`, `strftime_now` and unescaped `tojson`), `{% generation %}` blocks
    rendered as they are."""
    from datetime import datetime

    from jinja2 import TemplateError, nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):  # transformers tracks assistant tokens here; the text is the same
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body).set_lineno(lineno)

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, Generation])
    env.filters["tojson"] = tojson
    budget = {"left": RENDER_ITERATIONS, "until": float("inf")}
    sandbox_range = env.globals["range"]

    def bounded_range(*args):
        # the sandbox caps one range at 100,000 items, not two nested ones (10^10 iterations): the plan stops a
        # render past RENDER_ITERATIONS items of its ranges, or RENDER_SECONDS, and plans from the limits
        for k, item in enumerate(sandbox_range(*args)):
            budget["left"] -= 1
            if budget["left"] < 0 or (k % 1024 == 0 and time.monotonic() > budget["until"]):
                raise TemplateError(f"the chat template's loops ran past {RENDER_ITERATIONS:,} iterations or "
                                    f"{RENDER_SECONDS:g} s for one row")
            yield item

    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt),
                       range=bounded_range)
    template = env.from_string(source)
    template.rlft_budget = budget
    return template


def _tiny_template(cfg) -> tuple[str | None, dict[str, str]]:
    """rlft's tiny model not built yet: its builder's chat template and special tokens are known."""
    if cfg.model.name_or_path != "tiny" or cfg.model.init_from:
        return None, {}
    from rlft.tiny import CHAT_TEMPLATE, EOS_TOKEN, PAD_TOKEN

    return CHAT_TEMPLATE, {"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}


def load_counter(cfg) -> TokenCounter:
    """The model's tokenizer and chat template where they are on this machine, else the estimate."""
    files, where = tokenizer_files(cfg)
    config = _read_json(files.get("tokenizer_config.json"))
    source, special = _template_source(files, config), _special_tokens(config)
    has: bool | None = source is not None if files else None
    if not files:
        source, special = _tiny_template(cfg)
        has = True if source else None
    template, broken = None, ""
    if source:
        try:
            template = compile_template(source)
        except Exception as exc:  # noqa: BLE001 - a template jinja2 cannot compile costs only its tokens
            broken = f"; its chat template does not compile here ({type(exc).__name__}), not counted"
    tokenizer, counted = None, f"estimate: characters / {CHARS_PER_TOKEN}, no tokenizer.json in {where}"
    if "tokenizer.json" in files:
        try:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(files["tokenizer.json"]))
            counted = "counted with the model's tokenizer.json"
        except Exception as exc:  # noqa: BLE001 - an unreadable tokenizer falls back to the estimate
            counted = f"estimate: characters / {CHARS_PER_TOKEN}, tokenizer.json unreadable ({type(exc).__name__})"
    template_kwargs = cfg.data.chat_template_kwargs if isinstance(cfg.data.chat_template_kwargs, dict) else {}
    return TokenCounter(tokenizer, template, has, special, counted + broken, dict(template_kwargs))


# ---- the rows, rendered as the run renders them


def data_rows(cfg) -> tuple[list[dict], int | None, str]:
    """(rows, rows in the data or None, why none): at most MAX_ROWS, and no more than data.max_samples."""
    from rlft.data import DataError, peek_columns

    path = cfg.data.train
    limit = min(MAX_ROWS, cfg.data.max_samples or MAX_ROWS)
    if not path:
        return [], None, "data.train is unset"
    if path == "demo":
        from rlft.data.demo import demo_prompts

        rows = demo_prompts()
        return rows[:limit], min(len(rows), cfg.data.max_samples or len(rows)), ""
    if not Path(path).exists():
        return [], None, f"data.train {path} is not a local file"
    try:
        info = peek_columns(path, n_rows=limit)
    except DataError as exc:
        return [], None, f"data.train unreadable: {exc}"
    total = info.num_rows if not cfg.data.max_samples or info.num_rows is None else \
        min(info.num_rows, cfg.data.max_samples)
    return info.first_rows, total, ""


def _kind(value: Any) -> str:
    from rlft.data.messages import value_kind

    try:
        return value_kind(value)
    except TypeError:
        return "empty"  # a malformed cell: the run refuses it, the plan skips it


def _with_system(prompt: Any, system: str | None) -> Any:
    """rlft.data.prompts.prepare_prompt_dataset: the system message before a text prompt (which becomes
    messages), or before a chat prompt that has none."""
    if not system:
        return prompt
    if isinstance(prompt, str):
        return [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    return prompt if prompt and prompt[0].get("role") == "system" else [{"role": "system", "content": system},
                                                                        *prompt]


def _template_on(cfg, counter: TokenCounter) -> bool:
    """data.chat_template for plain-text rows (rlft.data.chat.decide); `always` without a template is the
    run's error, planned as without."""
    from rlft.data import DataError
    from rlft.data.chat import decide

    if counter.has_template is None or counter.template is None:
        return False
    try:
        return decide(cfg.data.chat_template, counter.has_template)
    except DataError:
        return False


def _joined(messages: list) -> str:
    """Messages without a template, as rlft's prompt counter reads them: their contents, one per line."""
    return "\n".join(str(m.get("content") or "") for m in messages)


def _cut(value, limit: int):
    """A prompt's text (or each message's) cut to `limit` characters: the plan caps a prompt at
    train.max_seq_length tokens anyway, and a 10 MB row took 33 s and 3 GB to render and tokenise whole."""
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, list):
        return [{**m, "content": m["content"][:limit]} if isinstance(m, dict) and isinstance(m.get("content"), str)
                else m for m in value]
    return value


def _char_limit(cfg) -> int:
    # a token is rarely over 16 characters: a cut row still counts as longer than the budget
    return max(1, int(cfg.train.max_seq_length or 0)) * CUT_CHARS_PER_TOKEN


def prompt_lengths(cfg, rows: list[dict], counter: TokenCounter) -> tuple[int, ...]:
    """Each prompt's tokens as the sampler renders it (rlft.rollout.sample.render_prompt): text through the
    tokenizer, messages through the chat template with the generation prompt."""
    from rlft.data.chat import prompt_messages

    on = _template_on(cfg, counter)
    system = cfg.data.system_prompt if cfg.data.train != "demo" else None  # the demo rows take none
    texts: list[tuple[str, bool]] = []  # (text, whether tokenizing it adds the special tokens)
    for row in rows:
        value = row.get(cfg.data.prompt_column)
        if _kind(value) == "empty":
            continue
        value = _cut(_with_system(value, system), _char_limit(cfg))
        if isinstance(value, str) and on:
            value = prompt_messages(value)
        if isinstance(value, str):
            texts.append((value, True))
        elif counter.template is not None:
            texts.append((counter.render(value, True), False))
        else:
            texts.append((_joined(value), True))
    return tuple(_count_in_order(counter, texts))


def _count_in_order(counter: TokenCounter, texts: list[tuple[str, bool]]) -> list[int]:
    """Token counts in the rows' order, encoded in one batch per kind of text."""
    out = [0] * len(texts)
    for flag in (True, False):
        idx = [i for i, (_, special) in enumerate(texts) if special is flag]
        for i, n in zip(idx, counter.count([texts[i][0] for i in idx], flag)):
            out[i] = n
    return out


def pair_lengths(cfg, rows: list[dict], counter: TokenCounter) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prompt tokens, longer answer's tokens) per preference pair, as TRL's DPO/ORPO tokenize them: a
    text answer gets the EOS token appended; an answer's tokens are what prompt + answer adds to the prompt."""
    from rlft.data.chat import preference_messages

    on = _template_on(cfg, counter)
    d = cfg.data
    eos = counter.special.get("eos_token", "")
    prompts, fulls, special = [], [], []
    for row in rows:
        pair = {k: _cut(row.get(col), _char_limit(cfg)) for k, col in
                (("prompt", d.prompt_column), ("chosen", d.chosen_column), ("rejected", d.rejected_column))}
        if any(_kind(v) == "empty" for v in pair.values()):
            continue
        if isinstance(pair["prompt"], str) and on:
            pair = preference_messages(pair, d.system_prompt)
        if isinstance(pair["prompt"], str) or counter.template is None:
            text = [v if isinstance(v, str) else _joined(v) for v in pair.values()]
            prompts.append(text[0])
            fulls.append([text[0] + a + ("" if a.endswith(eos) else eos) for a in text[1:]])
            special.append(True)
        else:
            prompts.append(counter.render(pair["prompt"], True))
            fulls.append([counter.render(pair["prompt"] + pair[k], False) for k in ("chosen", "rejected")])
            special.append(False)
    return _pair_counts(counter, prompts, fulls, special)


def _common_prefix(a: list, b: list) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _pair_counts(counter: TokenCounter, prompts: list[str], fulls: list[list[str]],
                 special: list[bool]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Encode in two batches (text rows add the tokenizer's special tokens, rendered ones do not). As TRL
    does, the prompt ends where its tokens and prompt + answer's part (tokens can merge across the boundary)."""
    p_out, a_out = [0] * len(prompts), [0] * len(prompts)
    for flag in (True, False):
        idx = [i for i, s in enumerate(special) if s is flag]
        p = counter.encode([prompts[i] for i in idx], flag)
        c = counter.encode([fulls[i][0] for i in idx], flag)
        r = counter.encode([fulls[i][1] for i in idx], flag)
        for j, i in enumerate(idx):
            n = min(_common_prefix(p[j], c[j]), _common_prefix(p[j], r[j]))
            p_out[i], a_out[i] = n, max(1, max(len(c[j]), len(r[j])) - n)
    return tuple(p_out), tuple(a_out)


def read_lengths(cfg) -> tuple[DataBasis | None, str]:
    """(the training data's lengths, or None with the reason the plan falls back to the config's limits)."""
    spec = get_spec(cfg.stage)
    if spec.uses_env and cfg.env.name:
        return None, f"episodes (env.name {cfg.env.name}) grow past the data's prompts"
    preference = set(PREFERENCE_COLUMNS) <= set(spec.data_columns)
    if not (spec.samples or preference):
        return None, "the stage trains on no prompt or preference data of its own"
    from rlft import progress

    with progress.task(f"plan: reading {cfg.data.train}"):  # large data takes seconds: shown, not silent
        rows, total, why = data_rows(cfg)
    if why:
        return None, why
    counter = load_counter(cfg)
    try:
        with progress.task(f"plan: counting the tokens of {len(rows)} rows"):
            if preference:
                prompts, answers = pair_lengths(cfg, rows, counter)
            else:
                prompts, answers = prompt_lengths(cfg, rows, counter), ()
    except Exception as exc:  # noqa: BLE001 - a template that fails on these rows: the limits still plan
        return None, f"cannot render the data's rows: {type(exc).__name__}: {exc}"
    if not prompts:
        return None, "data.train has no usable rows"
    return DataBasis(DataLengths(prompts, answers), cfg.data.train, len(rows), total, counter.tokenizer is not None,
                     counter.counted, _template_note(cfg, rows, counter)), ""


def _template_note(cfg, rows: list[dict], counter: TokenCounter) -> str:
    """What the chat template did to the rows, in words."""
    messages = not isinstance(rows[0].get(cfg.data.prompt_column), str)
    if counter.template is not None and (messages or _template_on(cfg, counter)):
        return "chat template applied"
    if counter.has_template is None or (messages and counter.has_template):
        return "chat template unknown here, not counted"
    return "no chat template" if not counter.has_template else f"chat template off (data.chat_template " \
                                                               f"{cfg.data.chat_template})"
