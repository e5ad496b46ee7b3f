"""RS-SFT recipe (rejection-sampling SFT, expert iteration): per round, sample
`rs_sft.num_samples_per_prompt` completions for every prompt of data.train, score them, keep the ones
the keep rule picks (`rs_sft.keep`: each prompt's best above `reward_threshold`, or every sample above
it; at most `max_samples`, highest totals first), then fine-tune on the kept pairs with TRL's
SFTTrainer (loss on completion tokens only). `rs_sft.rounds` repeats this from the updated policy.

The loop, resume and run lifecycle are shared with AWR: rlft.stages.common.sampled_sft.
"""

from __future__ import annotations

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.rundir.options import RunOptions


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    from rlft.stages.rs_sft.decide import rs_sft_decide
    from rlft.stages.common.sampled_sft import SampledSFT

    return SampledSFT(cfg, composed, opts, rs_sft_decide, sft_trainer).run()


def sft_trainer() -> type:
    """RS-SFT's trainer class: TRL's SFTTrainer (imported when a round trains, after the process is set up)."""
    from trl import SFTTrainer

    return SFTTrainer
