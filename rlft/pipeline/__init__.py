"""Stage chaining: one pipeline file runs stages in order, each starting from the one before it."""
