"""rlft: a YAML-driven command-line trainer for RL fine-tuning of causal LMs."""

__version__ = "0.1.0"
