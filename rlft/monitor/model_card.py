"""The model card (README.md) rlft writes next to a final model: what was trained, on what, how long, and
how to load it. TRL's generated card names the base model only by a cache path (or `[None]`) and says
nothing about the stage, data or rewards."""

from __future__ import annotations

from rlft.config.schema import RlftConfig
from rlft.config.stages import get_spec


def model_card(cfg: RlftConfig, steps: int) -> str:
    base = cfg.model.name_or_path
    adapter = cfg.lora.enabled
    what = (f"a LoRA adapter (r={cfg.lora.r}, alpha={cfg.lora.lora_alpha}, on {', '.join(cfg.lora.target_modules)})"
            if adapter else "a fully fine-tuned model")
    lines = [
        "---",
        f"base_model: {base}",
        "library_name: peft" if adapter else "library_name: transformers",
        "tags:",
        "- rlft",
        f"- {cfg.stage}",
        "---",
        "",
        f"# {cfg.stage.upper()} fine-tune of `{base}`",
        "",
        f"Trained by rlft: {what}, stage `{cfg.stage}`, {steps} optimizer steps at learning rate "
        f"{cfg.train.learning_rate:g} ({cfg.train.lr_scheduler_type}).",
        "",
        f"- Data: `{cfg.data.train}`" + (f" (evaluation: `{cfg.data.eval}`)" if cfg.data.eval else ""),
        f"- Chat template: `data.chat_template: {cfg.data.chat_template}`",
    ]
    if cfg.rewards:
        rewards = ", ".join(f"`{r.name or r.fn}` x {r.weight:g}" for r in cfg.rewards)
        lines.append(f"- Rewards: {rewards}")
    spec = get_spec(cfg.stage)
    if spec.model_card is not None:
        lines += spec.model_card(cfg)
    lines += ["", "The run folder's `config.yaml` holds every setting with the layer that set it; `metrics.jsonl` "
              "the per-step metrics.", ""]
    if adapter:
        load_base = "the tiny model written by `rlft tiny-model ./tiny`" if base == "tiny" else f"`{base}`"
        lines += ["## Loading", "", f"Load the base model ({load_base}) and this adapter:", "", "```python",
                  "from peft import PeftModel", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                  f"base = AutoModelForCausalLM.from_pretrained({'./tiny' if base == 'tiny' else base!r})",
                  "model = PeftModel.from_pretrained(base, 'path/to/final')",
                  "tokenizer = AutoTokenizer.from_pretrained('path/to/final')", "```", ""]
    return "\n".join(lines)
