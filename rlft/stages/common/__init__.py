"""Recipe parts two or more stages share (a stage folder never imports another): prompt_data.py (prompts and
rewards checked before the run folder, a sampling stage's inputs in one call), preference.py (DPO and ORPO: data,
lengths and their parts of the run lifecycle), preference_eval.py (their eval.start / eval.end), sampled_sft.py
(RS-SFT and AWR: the rounds and their parts of the run lifecycle), rounds.py and samples_log.py (RS-SFT/AWR rounds
of scored samples), episode_setup.py (PPO and episode GRPO's environment and value-head policy), loop_stage.py
(their trainer and eval parts of the run lifecycle around rlft's PPO loop), trl_config.py (TRL's objections as
config errors), plain_stage.py (the run lifecycle's parts a new stage gets without writing them: its inputs and
evaluation with `rewards:`)."""
