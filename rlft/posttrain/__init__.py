"""After training: `rlft eval`, `rlft generate` and `rlft export` on a run folder, one of its checkpoints,
a PEFT adapter folder or a plain transformers model folder, one job a module: target.py (what the argument points
at; its run's config.yaml, its adapter_config.json), config_layer.py (the run's config as a layer file, for eval and
`rewards try --from-run`), policy.py (the trained policy and its tokenizer loaded), generate.py, evaluate.py (and
the sampling settings eval uses) and export.py. Sampling and scoring go through the same rollout layer and reward
suite as training, so an eval number means what the training curve means.

This package imports nothing at load: import the module that does the job."""
