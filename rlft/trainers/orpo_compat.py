"""The one place rlft touches TRL's experimental ORPO trainer (`trl.experimental.orpo`).

TRL warns on every import from `trl.experimental`; rlft marks the `orpo` stage experimental itself
(`rlft list`), so the import here is silenced. When TRL moves or changes ORPO, only this module
needs to follow.

TRL 1.16's ORPO has no `max_prompt_length` either: `RlftORPOTrainer` shortens each prompt (after
the chat template is applied) to its last `max_prompt_length` tokens before TRL tokenizes the
pair, so that the answer, not the prompt, keeps its room within `max_length` (`tokenize_row`'s
parameters are checked with rlft/trainers/trl_private.py).
"""

from __future__ import annotations

import sys
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

__all__ = ["ORPOConfig", "ORPOTrainer", "RlftORPOTrainer"]


class RlftORPOTrainer(ORPOTrainer):
    def __init__(self, *args, max_prompt_length: int | None = None, **kwargs):
        self.rlft_max_prompt_length = max_prompt_length  # read by tokenize_row inside super().__init__
        self._rlft_truncated = 0
        super().__init__(*args, **kwargs)
        if self._rlft_truncated:
            print(f"rlft: {self._rlft_truncated} prompt(s) longer than max_prompt_length ({max_prompt_length} tokens) "
                  f"keep their last {max_prompt_length} tokens", file=sys.stderr)

    def tokenize_row(self, feature, model=None) -> dict:
        keep = self.rlft_max_prompt_length
        prompt = feature.get("prompt")
        if keep and not self.is_encoder_decoder and isinstance(prompt, str):
            ids = self.processing_class(prompt, add_special_tokens=False)["input_ids"]
            if len(ids) > keep:
                self._rlft_truncated += 1
                feature = {**feature, "prompt": self.processing_class.decode(ids[-keep:])}
        return super().tokenize_row(feature, model)
