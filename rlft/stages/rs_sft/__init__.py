"""The rs_sft stage: its spec, config section and checks (spec.py, no torch) and its runner (runner.py)."""
