"""KV window invariants over random append sequences."""

from __future__ import annotations

import random

import pytest
import torch

from streamvid.kv_window import Block, KVWindow


def block(i: int, n_tokens: int, pos_start: int = 0) -> Block:
    shape = (1, 2, n_tokens, 8)  # (batch, kv_heads, tokens, head_dim)
    return Block(id=i, t_start_s=float(i), t_end_s=float(i + 1), keys=(torch.randn(shape),) * 2,
                 values=(torch.randn(shape),) * 2, pos_start=pos_start, pos_span=n_tokens)


@pytest.mark.parametrize("seed", range(20))
def test_random_appends_keep_budget_order_and_lose_nothing(seed):
    rng = random.Random(seed)
    budget = rng.randint(10, 200)
    window = KVWindow(block(-1, 5), budget)
    appended, evicted_all = [], []
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
