"""AWR recipe (advantage-weighted regression): per round, sample `awr.num_samples_per_prompt`
completions for every prompt of data.train, score them, give each the advantage total − baseline
(`awr.baseline`: its prompt's mean or the mean of all samples), normalised over the whole set with
`normalize_advantage`, and the weight w = min(exp(advantage_beta * Â), clip_advantage); then train
with the weighted NLL on completion tokens (rlft.trainers.sft.AWRSFTTrainer).

The loop, resume and run lifecycle are shared with RS-SFT: rlft.stages.common.sampled_sft.
"""

from __future__ import annotations

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.rundir.options import RunOptions


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    from rlft.stages.awr.decide import awr_decide
    from rlft.stages.common.sampled_sft import SampledSFT

    return SampledSFT(cfg, composed, opts, awr_decide, awr_trainer).run()


def awr_trainer() -> type:
    """AWR's trainer class: the weighted NLL (imported when a round trains, after the process is set up)."""
    from rlft.trainers.sft import AWRSFTTrainer

    return AWRSFTTrainer
