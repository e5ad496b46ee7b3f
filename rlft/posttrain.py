"""After training: `rlft eval`, `rlft generate` and `rlft export` on a run folder, one of its checkpoints,
a PEFT adapter folder or a plain transformers model folder. Sampling and scoring go through the same
rollout layer and reward suite as training, so an eval number means what the training curve means."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rlft.config.schema import RlftConfig
from rlft.errors import RunError
from rlft.rundir.folder import checkpoint_step
from rlft.config.run_config import RunConfigError, read_run_config


@dataclass
class Target:
    """What a RUN_OR_ADAPTER argument points at."""
    weights: Path              # the adapter folder (adapter_config.json) or the full model folder
    is_adapter: bool
    run_root: Path | None      # the run folder, when the target is (in) one
    step: int | None           # the checkpoint step, when known


def resolve_target(path: Path, checkpoint: int | None = None) -> Target:
    """A run folder (its final/ model, or checkpoints/checkpoint-N with `checkpoint`), a checkpoint folder,
    an adapter folder or a model folder; a clear RunError otherwise."""
    path = Path(path)
    if not path.exists():
        raise RunError(f"{path}: no such run, checkpoint or model folder")
    run_root = None
    if (path / "config.yaml").is_file() and ((path / "final").exists() or (path / "checkpoints").is_dir()):
        run_root = path
        if checkpoint is not None:
            path = path / "checkpoints" / f"checkpoint-{checkpoint}"
            if not path.is_dir():
                have = sorted(checkpoint_step(p) for p in (run_root / "checkpoints").glob("checkpoint-*"))
                raise RunError(f"{path}: no such checkpoint (this run has: {', '.join(map(str, have)) or 'none'})")
        elif (path / "final").is_dir():
            path = path / "final"
        else:
            done = sorted((run_root / "checkpoints").glob("checkpoint-*"), key=checkpoint_step)
            if not done:
                raise RunError(f"{run_root}: the run has neither final/ nor a checkpoint yet")
            path = done[-1]
            print(f"rlft: {run_root} has no final/ yet; using its newest checkpoint {path.name}", file=sys.stderr)
    elif checkpoint is not None:
        raise RunError("--checkpoint needs a run folder (the one holding config.yaml and checkpoints/)")
    elif path.name == "final" or path.parent.name == "checkpoints":
        candidate = path.parent if path.name == "final" else path.parent.parent
        run_root = candidate if (candidate / "config.yaml").is_file() else None
    if (path / "adapter_config.json").is_file():
        adapter = True
    elif (path / "config.json").is_file():
        adapter = False
    else:
        raise RunError(f"{path}: neither a PEFT adapter (adapter_config.json) nor a transformers model (config.json)")
    step = checkpoint_step(path) if path.parent.name == "checkpoints" else None
    run_config(run_root)  # a damaged config.yaml: one line now, not a traceback after loading the model
    return Target(weights=path, is_adapter=adapter, run_root=run_root, step=step)


def run_config(run_root: Path | None) -> dict:
    """The run's config.yaml ({} without one); a RunError naming the file when it is not the settings a run writes."""
    if run_root is None or not (run_root / "config.yaml").is_file():
        return {}
    try:
        data = read_run_config(run_root)
    except RunConfigError as exc:
        what = f"not readable YAML ({exc.why})" if exc.found is None else "the whole file is not what rlft writes there"
        raise RunError(f"{exc.path} is damaged: {what}; restore it, or pass the adapter or checkpoint folder itself") \
            from None
    wrong = next((k for k, kind in (("stage", str), ("model", dict), ("data", dict), ("rewards", list),
                                    ("train", dict), ("lora", dict)) if data.get(k) is not None
                  and not isinstance(data[k], kind)), None)
    if wrong:
        raise RunError(f"{run_root / 'config.yaml'} is damaged: {wrong} is not what rlft writes there; restore it, or "
                       f"pass the adapter or checkpoint folder itself")
    return data


EVAL_CONFIG_NAME = ".rlft-eval-config.yaml"


def eval_config_file(run_root: Path, stage: str) -> Path:
    """The run's resolved config.yaml cut to what eval reads (model, data, rewards, train, the stage's own
    section, its `eval:` sampling), written beside it so relative paths keep their meaning; the caller deletes it."""
    import yaml

    from rlft.config.stages import SPECS

    data = run_config(run_root)
    keep = {"model", "data", "rewards", "train", "lora", "eval", SPECS[stage].section if stage in SPECS else stage}
    path = run_root / EVAL_CONFIG_NAME
    if path.is_symlink():  # planted in the run folder: writing through it would replace whatever it points to
        raise RunError(f"{path} is a symbolic link (to {os.readlink(path)}): rlft writes the run's config there for "
                       f"this command and does not write through links; remove the link")
    # a new file (O_EXCL: never an existing file or link) renamed over the name: a link or hard link planted there
    # after the check is replaced, never written through
    fd, tmp = tempfile.mkstemp(prefix=f"{EVAL_CONFIG_NAME}.", suffix=".tmp", dir=run_root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(yaml.safe_dump(escaped({k: v for k, v in data.items() if k in keep}), sort_keys=False))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def escaped(settings: dict) -> dict:
    """The run's resolved settings as a config layer: a `${...}` left in a value is text the user escaped (`\\${..}`)
    when the run started, so it is escaped again rather than interpolated a second time (rewards[].kwargs reach
    the reward verbatim and never interpolate)."""
    def walk(node, verbatim=False):
        if isinstance(node, dict):
            return {k: walk(v, verbatim) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, verbatim) for v in node]
        return node.replace("${", "\\${") if isinstance(node, str) and not verbatim else node

    def reward(item):
        return {k: walk(v, verbatim=k == "kwargs") for k, v in item.items()} if isinstance(item, dict) else walk(item)

    return {k: [reward(item) for item in v] if k == "rewards" and isinstance(v, list) else walk(v)
            for k, v in settings.items()}


def run_model_name(run_root: Path | None) -> str | None:
    """`model.name_or_path` as the run's config.yaml states it (as the user gave it)."""
    name = (run_config(run_root).get("model") or {}).get("name_or_path")
    return name if isinstance(name, str) else None


def adapter_config(weights: Path) -> dict:
    """A PEFT adapter folder's adapter_config.json; a RunError naming it when it is not a JSON object."""
    path = weights / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict):
        raise RunError(f"{path} is damaged (not a JSON object): the adapter in {weights} cannot be loaded")
    return config


def base_model_path(target: Target) -> str:
    """Where the adapter's base model is on this machine: the adapter's recorded base if it exists
    here, else the run's `model.name_or_path` (`tiny` built on demand, as in training)."""
    from rlft.tiny import ensure_tiny_model

    recorded = adapter_config(target.weights).get("base_model_name_or_path")
    for name in (recorded, run_model_name(target.run_root)):
        if not name or not isinstance(name, str):
            continue
        if name == "tiny":
            std = (run_config(target.run_root).get("model") or {}).get("tiny_init_std")
            return str(ensure_tiny_model(**({"init_std": std} if std is not None else {})))
        if Path(name).exists() or not name.startswith(("/", ".")):
            return name
    raise RunError(f"{target.weights}: its base model {recorded!r} is not on this machine and no run config names "
                   f"another; pass the run folder instead")


def chain_start(target: Target, dtype: str):
    """The weights the target's adapter was trained on when its run started from an earlier run (`model.init_from`,
    a pipeline's later stage): that chain rebuilt as training rebuilt it. None for a run that started from its base
    (the adapter's recorded base is then right)."""
    settings = run_config(target.run_root)
    model_section = settings.get("model") if isinstance(settings.get("model"), dict) else {}
    if not model_section.get("init_from"):
        return None
    from rlft.config.schema import from_dict
    from rlft.models.init_from import start_model
    from rlft.models.weights import ModelLoadError

    cfg = from_dict(RlftConfig, {k: settings[k] for k in ("model", "train") if isinstance(settings.get(k), dict)})
    cfg.model.torch_dtype = dtype
    try:
        return start_model(target.run_root, cfg)
    except ModelLoadError as exc:
        raise RunError(f"{target.run_root}: {exc}") from None


def load_policy(target: Target, dtype: str = "float32"):
    """The trained policy (adapter on its base, or the full model) and its tokenizer, in eval mode."""
    import torch
    from transformers import AutoTokenizer

    from rlft.data.chat import bind_template_kwargs
    from rlft.models.weights import load_adapter, pretrained_causal_lm

    dt = getattr(torch, dtype)
    if target.is_adapter:
        base_path = base_model_path(target)
        start = chain_start(target, dtype)
        model = load_adapter(start if start is not None else pretrained_causal_lm(base_path, dt), target.weights)
        tok_path = target.weights if (target.weights / "tokenizer_config.json").is_file() else base_path
    else:
        model = pretrained_causal_lm(str(target.weights), dt)
        tok_path = target.weights
    tokenizer = AutoTokenizer.from_pretrained(str(tok_path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # the run's chat-template variables: the trained policy is sampled on prompts rendered as in training
    template_kwargs = (run_config(target.run_root).get("data") or {}).get("chat_template_kwargs")
    bind_template_kwargs(tokenizer, template_kwargs if isinstance(template_kwargs, dict) else None)
    model.eval()
    return model, tokenizer


def as_chat(tokenizer, text: str, raw: bool = False):
    """A plain prompt as one user message when the tokenizer has a chat template (unless raw)."""
    if raw or not getattr(tokenizer, "chat_template", None):
        return text
    return [{"role": "user", "content": text}]


# -- rlft generate -------------------------------------------------------------------------------------
def generate(target: Target, prompts: list[str], n: int, max_tokens: int, temperature: float, top_p: float,
             seed: int, raw: bool = False) -> list[dict]:
    from rlft.rollout import SamplingParams, sample

    model, tokenizer = load_policy(target)
    rolls = sample(model, tokenizer, [as_chat(tokenizer, p, raw) for p in prompts], n,
                   SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_tokens, seed=seed))
    return [{"prompt": prompts[rolls.prompt_index[i]], "completion": rolls.completions[i],
             "finished": rolls.finished[i] if rolls.finished else None} for i in range(len(rolls))]


# -- rlft eval -----------------------------------------------------------------------------------------
def sampling_section(cfg: RlftConfig):
    """The stage's sampling settings (its section's temperature/top_p/max_tokens), GRPO's otherwise."""
    from rlft.config.stages import SPECS

    section = getattr(cfg, SPECS[cfg.stage].section, None) if cfg.stage in SPECS else None
    return section if section is not None and hasattr(section, "max_tokens") else cfg.grpo


def eval_settings(cfg: RlftConfig, n: int | None = None):
    """How `rlft eval` samples: the config's `eval:` section (a run's own, when evaluating a run) over the stage's
    sampling settings (4 samples per prompt unless eval.samples_per_prompt says otherwise), as the run's own
    evaluations do; `n` (the -n flag), when given, wins."""
    import dataclasses

    from rlft.config.eval_sampling import EvalSettings, eval_sampling

    s = sampling_section(cfg)
    settings = eval_sampling(cfg, EvalSettings(n=4, max_new_tokens=s.max_tokens, temperature=s.temperature,
                                               top_p=getattr(s, "top_p", 1.0), batch_size=64))
    return settings if n is None else dataclasses.replace(settings, n=n)


def evaluate(target: Target, cfg: RlftConfig, data: str, n: int | None, out: Path, max_prompts: int | None = None,
             seed: int | None = None) -> dict:
    """Sample n completions per evaluation prompt (None: as the config's `eval:` section says, `eval_settings`),
    score them with the config's rewards, write one row per completion to `out` (completions.jsonl's format) and
    return per-reward and total means, and each reward's failures (completions it gave no score)."""
    from rlft.rewards import RewardResolveError, build_reward_suite
    from rlft.rollout import CompletionLog, SamplingParams, sample, score
    from rlft.stages.common.prompt_data import prepare_prompt_data

    try:
        suite = build_reward_suite([vars(r) for r in cfg.rewards], max_failure_fraction=1.0)
    except (RewardResolveError, ValueError) as exc:
        raise RunError(str(exc)) from None
    if not suite.rewards:
        raise RunError("the config has no rewards to score with (rewards: [...])")
    model, tokenizer = load_policy(target)
    cfg.data.eval = data
    ds = prepare_prompt_data(cfg, tokenizer, suite, "eval")  # checked and fitted like training prompts
    if max_prompts:
        ds = ds.select(range(min(max_prompts, len(ds))))
    if len(ds) == 0:
        raise RunError(f"{data}: no prompts to evaluate")
    settings = eval_settings(cfg, n)
    params = SamplingParams(temperature=settings.temperature, top_p=settings.top_p,
                            max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
                            seed=cfg.train.seed if seed is None else seed, greedy=settings.greedy)
    prompts = list(ds["prompt"])
    ids = list(ds["prompt_id"]) if "prompt_id" in ds.column_names else list(range(len(prompts)))
    rolls = sample(model, tokenizer, prompts, settings.n, params, prompt_ids=ids)
    columns = {c: list(ds[c]) for c in ds.column_names if c not in ("prompt", "prompt_id")}
    scores = score(rolls, suite, columns)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    CompletionLog(out, -1).write_rollouts(target.step or 0, rolls, scores)

    def mean(values):
        got = [v for v in values if v is not None]
        return statistics.fmean(got) if got else None

    return {"model": str(target.weights), "data": data, "prompts": len(prompts), "n": settings.n,
            "completions": len(rolls), "reward_mean": mean(scores.total),
            "unscored": sum(v is None for v in scores.total),
            "rewards": {name: mean(scores.per_reward[name]) for name in scores.names},
            "reward_failures": {name: sum(v is None for v in scores.per_reward[name]) for name in scores.names},
            "sampling": settings.as_dict(), "out": str(out)}


# -- rlft export ---------------------------------------------------------------------------------------
def check_export_dir(out: Path) -> None:
    """The export goes to a new or empty folder: never mixed with, or over, files the user has."""
    if out.exists() and not out.is_dir():
        raise RunError(f"-o {out} is a file; choose a new or empty folder")
    if out.is_dir() and any(out.iterdir()):
        raise RunError(f"-o {out} exists and is not empty; choose a new or empty folder")


def export(target: Target, out: Path, merge: bool) -> Path:
    """`merge`: the adapter merged into its base, saved as a plain transformers model folder; otherwise
    the adapter itself. Either way the base is recorded by the model's name as the run gave it (or the
    merged model stands alone), never by a path that only exists on this machine."""
    check_export_dir(out)
    name = run_model_name(target.run_root)
    adapter_cfg = adapter_config(target.weights) if target.is_adapter else {}  # damaged: said before writing anything
    if not target.is_adapter:
        if merge:
            raise RunError(f"{target.weights} is a full model already (no adapter to merge); copy the folder instead")
    if merge:
        model, tokenizer = load_policy(target)
        merged = model.merge_and_unload()
        merged.config._name_or_path = name or ""
        merged.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    else:
        shutil.copytree(target.weights, out, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("optimizer.pt", "scheduler.pt", "rng_state*",
                                                                          "trainer_state.json", "training_args.bin",
                                                                          "rlft_*"))
        if not target.is_adapter:  # a full model folder: copied as it is
            return out
        cfg_path = out / "adapter_config.json"
        recorded = adapter_cfg.get("base_model_name_or_path")
        recorded = recorded if isinstance(recorded, str) else ""
        if name:  # the base as the user named it: a hub id, rlft's `tiny`, or their own path
            adapter_cfg["base_model_name_or_path"] = name
        elif Path(recorded).is_absolute():
            adapter_cfg["base_model_name_or_path"] = Path(recorded).name
        cfg_path.write_text(json.dumps(adapter_cfg, indent=2) + "\n")
        card = out / "README.md"
        if card.is_file() and Path(recorded).is_absolute():  # PEFT's model card repeats the base path
            card.write_text(card.read_text().replace(recorded, adapter_cfg["base_model_name_or_path"]))
    return out
