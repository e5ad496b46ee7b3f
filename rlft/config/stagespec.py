"""What a stage is, as plain data: `StageSpec`, which each stage folder (`rlft/stages/<name>/spec.py`)
fills in once, and `StageChecks`, what its cross-field checks get to read and report with.

Standard library only, so `validate-config` reads every stage without torch. The layers above look a
stage up through `rlft.config.stages.get_spec` instead of comparing stage names:

- `rlft.config.schema` puts `section_cls` into the config under `section`;
- `rlft.config.validate` runs `section_checks` always, `checks` and then `file_checks` for the stage
  being trained;
- `rlft.config.render` adds `explain(cfg)` to `show-config --explain`;
- `rlft.stages.get_runner` imports `runner`; `rlft.config.trl_fields` reads `trl_config`/`trl_modeled`;
- `rlft.monitor` reads `metrics`, `console`, `health_rules`, `model_card(cfg)` and `report_note`;
- `rlft.runtime` reads `total_steps` and refuses a resume when a `resume_breaking` key changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# Health rules every training stage gets (names of rules in rlft.monitor.health.RULES).
BASE_HEALTH = ("loss_nan", "grad_norm")
TRAIN_METRICS = ("grad_norm", "learning_rate")
PREFERENCE_METRICS = ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins")
PREFERENCE_COLUMNS = ("data.prompt_column", "data.chosen_column", "data.rejected_column")


@dataclass(frozen=True)
class StageChecks:
    """What a stage's cross-field checks read (the composed config, before typing: values may be of any
    type) and how they report: `error(key, message)` / `warning(key, message)` name the key's layer."""
    stage: str                              # the stage being validated
    hw: str                                 # the hardware profile's name
    get: Callable[[str], Any]               # a dotted key's raw value (None when unset)
    report: Callable[[str, str, str], None]  # (key, message, level)
    limit: Callable[[str], Any]             # the schema's upper bound (`le`) of a key
    set_by_user: Callable[[str], bool]      # the key was set by the user's files or the command line
    for_train: bool = False                 # `rlft train`: a missing input is an error, not a warning
    check_files: bool = True                # files named by the config may be read (data, modules)
    trains: bool = True                     # the config trains (not only samples and scores, as eval does)

    def error(self, key: str, message: str) -> None:
        self.report(key, message, "error")

    def warning(self, key: str, message: str) -> None:
        self.report(key, message, "warning")


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class StageSpec:
    name: str                               # `--stage` value and the profile `configs/stages/<name>.yaml`
    section: str | None                     # its config section (`grpo:`), None when it has none
    runner: str | None                      # "module:function" of `run(cfg, composed, opts)`; None = not built yet
    order: int = 100                        # place among the `--stage` choices (the guide's order)
    section_cls: type | None = None         # the dataclass of its section (defaults, help, ranges)
    section_help: str = ""                  # one line on the section in `show-config --explain`
    section_order: int = 100                # place of the section in config.yaml
    trl_config: str | None = None           # "module:Class" of the TRL config it builds, None = rlft's own trainer
    trl_modeled: tuple[tuple[str, str], ...] = ()  # (TRL option, rlft key that sets it) beyond the common train.* ones
    data_columns: tuple[str, ...] = ("data.prompt_column",)  # config keys naming the columns data.train must have
    samples: bool = False                   # generates and scores completions (needs `rewards:`, writes completions.jsonl)
    uses_reference: bool = False            # measures KL or preferences against a frozen model
    uses_env: bool = False                  # can run multi-turn episodes in `env.name`
    reloads_rewards: bool = False           # `monitor.reward_hot_reload` re-imports its reward files per step
    total_steps: Callable[[Any], int] | None = None  # steps a run trains, from the typed config (None: train.max_steps)
    metrics: tuple[str, ...] = ()           # keys every metrics.jsonl row carries (null when not measured that step)
    console: tuple[str, ...] = ("loss",)    # headline metrics on the console line
    health_rules: tuple[str, ...] = BASE_HEALTH  # rules of rlft.monitor.health.RULES checked on each record
    resume_breaking: tuple[str, ...] = ()   # stage keys whose change makes its checkpoints meaningless
    experimental: bool = False              # wraps an experimental upstream API
    checks: Callable[[StageChecks], None] | None = None          # cross-field checks when this stage trains
    section_checks: Callable[[StageChecks], None] | None = None  # its section's own consistency, always
    file_checks: Callable[[StageChecks], None] | None = None     # checks that read files, once the rest passed
    schedule: Callable[[Any], str] | None = None          # `--explain`'s schedule line, where train.* do not set it
    explain: Callable[[Any], list[str]] | None = None     # `show-config --explain` notes on the typed config
    model_card: Callable[[Any], list[str]] | None = None  # lines of final/README.md on what the stage trained
    report_note: str | None = None          # the report's completions tab when the stage samples nothing

    @property
    def built(self) -> bool:
        return self.runner is not None

    def modeled(self) -> dict[str, str]:
        return dict(self.trl_modeled)
