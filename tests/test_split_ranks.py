"""Work split over the processes of a multi-process run: which rank draws which generate call
(rlft.rollout.split), GRPO's whole-groups check, and PPO's whitening over the global batch across two real
(gloo, CPU) processes."""

import os

import pytest
import torch

from rlft.rollout.split import gather, rank_calls


def test_rank_calls_round_robin_one_entry_per_wave():
    # 5 chunks on 2 ranks: waves {0, 1}, {2, 3}, {4}; rank 1 has nothing in the last wave
    assert rank_calls(5, 0, 2) == [(0, True), (2, True), (4, True)]
    assert rank_calls(5, 1, 2) == [(1, True), (3, True), (None, False)]
    # sharded model: every rank calls generate in every wave, a repeated chunk's results dropped
    assert rank_calls(5, 1, 2, even=True) == [(1, True), (3, True), (3, False)]
    assert rank_calls(1, 2, 3, even=True) == [(0, False)]  # fewer chunks than ranks
    assert rank_calls(0, 0, 2, even=True) == []
    # one process draws every chunk in order
    assert rank_calls(3, 0, 1) == [(0, True), (1, True), (2, True)]
    # every chunk is kept exactly once over the ranks, whatever their number
    for world in (1, 2, 3, 4):
        kept = sorted(k for r in range(world) for k, keep in rank_calls(7, r, world, even=True) if keep)
        assert kept == list(range(7))
        assert len({len(rank_calls(7, r, world)) for r in range(world)}) == 1


def test_gather_in_one_process_is_the_object_itself():
    assert gather({"a": 1}, 1) == [{"a": 1}]


def test_check_whole_groups():
    from rlft.trainers.grpo import check_whole_groups  # here: the gloo workers below import this module

    check_whole_groups([3, 3, 5, 5], 2)
    check_whole_groups([3, 3, 3, 3], 2)  # the same prompt twice in a batch: still whole groups
    check_whole_groups([3, 3, 5], 2)  # a share of 3 rows with groups of 2: split by the layout, nothing to hold
    with pytest.raises(RuntimeError, match=r"process 1 .* rows 0\.\.1 are not one prompt's group of 2"):
        check_whole_groups([3, 5, 5, 3], 2, rank=1)


def _whiten_worker(rank: int, world: int, out_dir: str) -> None:
    """One of two gloo processes: PPO's advantage estimator over this rank's half of the batch, its whitening
    moments summed as RlftPPOTrainer sums them (accelerate's reduce)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0", RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    import torch.distributed as dist
    from accelerate import PartialState
    from accelerate.utils import reduce

    from rlft.algos import gae_advantages
    from rlft.rollout.split import gather, process_group

    # the group meets through a file (no port to race for on a busy machine); accelerate joins it as it is
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=world)
    PartialState(cpu=True)
    assert process_group() == (rank, world)
    rewards, values, mask = _batch()
    half = slice(rank * 2, rank * 2 + 2)
    adv, _ = gae_advantages(rewards_BT=rewards[half], values_BT=values[half], mask_BT=mask[half],
                                             gamma=1.0, lam=0.95, sum_over_processes=lambda t: reduce(t, "sum"))
    parts = gather(adv.tolist(), world)  # every rank gets every rank's rows, in rank order
    torch.save(torch.tensor([row for part in parts for row in part]), os.path.join(out_dir, f"rank{rank}.pt"))
    # leave as rlft's launched ranks do (rlft.runtime.ranks.exit_rank): gloo's teardown at interpreter exit can
    # abort a process that finished ("terminate called without an active exception")
    dist.destroy_process_group()
    os._exit(0)


def _batch():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(4, 6, generator=g)
    values = torch.randn(4, 6, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]]).float()
    return rewards, values * mask, mask


def test_ppo_advantages_whitened_over_two_gloo_processes_equal_one_process(tmp_path):
    import torch.multiprocessing as mp

    from rlft.algos import gae_advantages

    mp.spawn(_whiten_worker, args=(2, str(tmp_path)), nprocs=2, join=True)
    rewards, values, mask = _batch()
    whole, _ = gae_advantages(rewards_BT=rewards, values_BT=values, mask_BT=mask, gamma=1.0, lam=0.95)
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert torch.allclose(got, whole, atol=1e-6), (got - whole).abs().max()
    print(f"max |2 processes - 1 process| = {float((got - whole).abs().max()):.2e}")
