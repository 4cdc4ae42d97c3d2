"""KV window invariants over random append sequences."""

from __future__ import annotations

import random

import pytest
import torch

from streamvid.kv.window import Block, KVWindow


def block(i: int, n_tokens: int, pos_start: int = 0) -> Block:
    shape = (1, 2, n_tokens, 8)  # (batch, kv_heads, tokens, head_dim)
    return Block(id=i, t_start_s=float(i), t_end_s=float(i + 1), keys=(torch.randn(shape),) * 2,
                 values=(torch.randn(shape),) * 2, pos_start=pos_start, pos_span=n_tokens)


def newest_that_fit(sizes: list[int], budget: int) -> list[int]:
    """A fresh reference: the indices of as many of the newest blocks (of `sizes` tokens, appended in order) as fit
    in `budget` tokens together, and always the newest one."""
    keep, total = [], 0
    for i in reversed(range(len(sizes))):
        if keep and total + sizes[i] > budget:
            break
        keep.insert(0, i)
        total += sizes[i]
    return keep


def test_eviction_keeps_the_window_as_full_as_the_budget_allows():
    """Budget 100 tokens, blocks of 30, 40, 20, 50, 10, 90 and 100 tokens, worked by hand: 30+40+20 = 90 fit;
    the 50 makes 140: the 30 goes (110, still over), then the 40 (70); adding back the 40 would make 110. The 10
    makes 80: nothing goes. The 90 makes 170: 20 and 50 go (100 = the budget exactly). The 100 alone fills it."""
    window = KVWindow(block(-1, 5), budget_tokens=100)
    sizes = [30, 40, 20, 50, 10, 90, 100]
    expect_evicted = [[], [], [], [0, 1], [], [2, 3], [4, 5]]
    expect_window = [[0], [0, 1], [0, 1, 2], [2, 3], [2, 3, 4], [4, 5], [6]]
    for i, n in enumerate(sizes):
        evicted = window.append(block(i, n))
        assert [e.id for e in evicted] == expect_evicted[i], f"block {i} ({n} tokens) evicted the wrong blocks"
        assert [b.id for b in window.snapshot().blocks] == expect_window[i]
    assert window.tokens == 100


@pytest.mark.parametrize("seed", range(20))
def test_random_appends_keep_budget_order_and_lose_nothing(seed):
    rng = random.Random(seed)
    budget = rng.randint(10, 200)
    window = KVWindow(block(-1, 5), budget)
    appended, evicted_all, sizes = [], [], []
    for i in range(rng.randint(1, 80)):
        b = block(i, rng.randint(1, 60))
        appended.append(b.id)
        evicted = window.append(b)
        assert [e.id for e in evicted] == sorted(e.id for e in evicted), "evicted oldest first"
        evicted_all += [e.id for e in evicted]
        snap = window.snapshot()
        tokens = sum(x.n_tokens for x in snap.blocks)
        assert tokens == window.tokens
        assert tokens <= budget or len(snap.blocks) == 1, "over budget only when the newest block alone is"
        assert snap.blocks[-1].id == b.id, "the newest block always stays"
        assert evicted_all + [x.id for x in snap.blocks] == appended, "window + evicted == appended, in order"
        if evicted:  # as full as the budget allows: the block evicted last would not have fitted
            assert tokens + evicted[-1].n_tokens > budget, "evicted a block more than the budget required"
        assert [x.id for x in snap.blocks] == newest_that_fit(sizes + [b.n_tokens], budget)
        sizes.append(b.n_tokens)


@pytest.mark.parametrize("seed", range(10))
def test_a_window_in_seconds_evicts_no_more_than_the_budget_requires(seed):
    rng = random.Random(seed)
    budget_s = rng.uniform(2.0, 12.0)
    window = KVWindow(block(-1, 5), budget_s=budget_s)
    for i in range(rng.randint(5, 60)):
        evicted = window.append(block(i, rng.randint(1, 30)))
        snap = window.snapshot()
        span = snap.blocks[-1].t_end_s - snap.blocks[0].t_start_s
        assert span <= budget_s + 1e-6 or len(snap.blocks) == 1
        if evicted:  # keeping the last evicted block (one second long) would have passed the budget
            assert snap.blocks[-1].t_end_s - evicted[-1].t_start_s > budget_s + 1e-6


def test_tensor_bytes_flat_once_full():
    window = KVWindow(block(-1, 4), budget_tokens=64)
    sizes = []
    for i in range(50):
        window.append(block(i, 16))
        snap = window.snapshot()
        sizes.append(sum(b.nbytes for b in (snap.sinks, *snap.blocks)))
    assert len(set(sizes[4:])) == 1 and sizes[4] == max(sizes)


def test_snapshot_is_stable_while_window_moves_on():
    window = KVWindow(block(-1, 4), budget_tokens=32)
    for i in range(3):
        window.append(block(i, 16))
    snap = window.snapshot()
    ids = [b.id for b in snap.blocks]
    for i in range(3, 10):
        window.append(block(i, 16))
    assert [b.id for b in snap.blocks] == ids


def test_rebase_moves_blocks_right_after_sinks():
    window = KVWindow(block(-1, 4), budget_tokens=1000)
    for i in range(3):
        window.append(block(i, 10, pos_start=500 + 10 * i))
    window.rebase(lambda b, pos: b.replace(pos_start=pos))
    assert [b.pos_start for b in window.snapshot().blocks] == [4, 14, 24]


def test_bad_budget():
    with pytest.raises(ValueError, match="budget"):
        KVWindow(block(-1, 4), 0)
