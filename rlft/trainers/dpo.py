"""TRL's DPOTrainer with rlft's prompt-length limit.

TRL 1.16 truncates only the whole prompt + answer sequence (`max_length`, keeping its start) and
drops pairs whose prompt alone fills it; it has no `max_prompt_length`. rlft keeps the key: after
TRL tokenizes a dataset, prompts longer than `max_prompt_length` tokens keep their last tokens (the
part nearest the answer), and only then are pairs whose prompt still fills `max_length` dropped.
`_prepare_dataset` is TRL's private method: listed in rlft/trainers/trl_private.py.
"""

from __future__ import annotations

import copy
import sys

from datasets import Dataset
from trl import DPOTrainer


class RlftDPOTrainer(DPOTrainer):
    def __init__(self, *args, max_prompt_length: int | None = None, **kwargs):
        self.rlft_max_prompt_length = max_prompt_length  # read by _prepare_dataset inside super().__init__
        super().__init__(*args, **kwargs)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        keep = self.rlft_max_prompt_length
        if not keep or not isinstance(dataset, Dataset):  # streamed data: TRL's own truncation only
            return super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        untruncated = copy.copy(args)  # TRL's own filter must run after the prompt is shortened
        untruncated.max_length = None
        dataset = super()._prepare_dataset(dataset, processing_class, untruncated, dataset_name)
        if "prompt_ids" not in dataset.column_names:
            return dataset
        n = sum(len(p) > keep for p in dataset["prompt_ids"])
        if n:
            print(f"rlft: {dataset_name} data: {n} prompt(s) longer than max_prompt_length ({keep} tokens) "
                  f"keep their last {keep} tokens", file=sys.stderr)
            dataset = dataset.map(lambda ex: {"prompt_ids": ex["prompt_ids"][-keep:]},
                                  desc=f"Truncating prompts of {dataset_name} dataset")
        if args.max_length is not None and args.truncation_mode == "keep_start":
            before = len(dataset)
            dataset = dataset.filter(lambda ex: len(ex["prompt_ids"]) < args.max_length)
            if len(dataset) < before:
                print(f"rlft: {dataset_name} data: dropped {before - len(dataset)} pair(s) whose prompt alone fills "
                      f"max_length ({args.max_length} tokens)", file=sys.stderr)
        return dataset
