"""Recipe parts two or more stages share (a stage folder never imports another): prompt_data.py (prompts and
rewards checked before the run folder), rounds.py and samples_log.py (RS-SFT/AWR rounds of scored samples),
episode_setup.py (PPO and episode GRPO's environment and value-head policy), trl_config.py (TRL's objections as
config errors), plain_stage.py (the run lifecycle's parts a new stage gets without writing them: its evaluation
with `rewards:`)."""
