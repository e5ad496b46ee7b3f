"""The adaptive KL controller's horizon when `grpo.kl_horizon` / `ppo.kl_horizon` is null: a tenth of the run, so
the controller acts within the run it is used in. Config knowledge (`--explain` states it); the controllers in
rlft.algos.kl_control use the same rule."""

HORIZON_FRACTION = 10  # an unset horizon is the run's steps / this


def default_horizon(total_steps: int) -> int:
    """The horizon (in steps) of a run of `total_steps` steps when the config leaves it unset."""
    return max(1, -(-int(total_steps) // HORIZON_FRACTION))
