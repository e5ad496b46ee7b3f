"""The command line's verbs, one module each (rlft/cli.py registers them): validate.py (validate-config,
show-config, list, keys), plan.py, env.py, tiny_model.py, train.py, report.py, eval.py (eval, generate, export),
pipeline.py, rewards.py (rewards try, over reward_try.py), and common.py (the options every verb shares, the config
loaded, and the one mapping from errors to messages and exit codes)."""
