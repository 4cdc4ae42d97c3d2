"""The step's token budget: how many prefill tokens one scheduler step may spend, and how the answers' prompts and
the streams' chunks share them.

    budget = default_step_tokens(adapter, config, max_batch)    # when the `step_tokens` setting is not given
    decoding, last, more, budget = split_answers(running, budget)
    ready, budget = chunks_that_fit(streams, max_batch, budget)
    for group in groups(rows, max_batch): ...                   # forwards of at most max_batch rows

An answer decoding past its prompt costs one token; a prompt being prefilled gets an equal share of what is left
(`shares`: water-filling, a share a prompt does not need goes to the others), so a long prompt is prefilled over
several steps while the others go on. Every category always makes progress: the first prompt and the first chunk
are taken whatever the budget left.
"""

from __future__ import annotations

from streamvid.adapters.base import VideoLLMAdapter
from streamvid.config import EngineConfig
from streamvid.engine.stream import Stream


def default_step_tokens(adapter: VideoLLMAdapter, config: EngineConfig, max_batch: int) -> int:
    """512, or the tokens of `max_batch` chunks of `frame_px` frames when more (so the chunks of a full batch are
    never split across steps)."""
    px = config.frame_px or 448
    return max(512, max_batch * adapter.tokens_per_chunk(px, px, config.frames_per_chunk))


def split_answers(running: list[Stream], budget: int) -> tuple[list[Stream], list[Stream], list[Stream], int]:
    """The running answers' part of a step: those decoding past their prompt (a token each), those whose prompt's
    last piece this step feeds (a first token comes of it), those fed a piece short of it, and the budget left.
    Each piece's size is set as its decoding's `prefill_limit`; a prompt whose share is 0 waits for the next step."""
    prefilling = [s for s in running if prefill_left(s.decoding.decoding)]
    decoding = [s for s in running if s not in prefilling]
    budget -= len(decoding)
    needs = [prefill_left(s.decoding.decoding) for s in prefilling]
    pieces = shares(needs, budget)
    last, more = [], []
    for s, need, n in zip(prefilling, needs, pieces):
        if n:
            s.decoding.decoding.prefill_limit = n
            (last if n == need else more).append(s)
    return decoding, last, more, budget - sum(pieces)


def chunks_that_fit(streams: list[Stream], max_batch: int, budget: int) -> tuple[list[Stream], int]:
    """The streams whose oldest complete chunk this step encodes, in their order (round-robin), up to `max_batch`
    and as many as `budget` holds (a chunk's cost estimated from the stream's newest block), always at least one;
    and the budget left."""
    ready = []
    for s in streams:
        if len(ready) == max_batch:
            break
        if s.ingest.chunk_ready and not s.closed:
            cost = s.ingest.job_tokens
            if ready and cost > budget:
                break  # the next streams' chunks wait for the next step (round-robin: they come first then)
            ready.append(s)
            budget -= cost
    return ready, budget


def groups(items: list, size: int) -> list[list]:
    """`items` in runs of at most `size`, in order."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def prefill_left(decoding) -> int:
    """Prompt tokens an adapter's decoding has not fed yet (0 for decodings that prefill in one go)."""
    return getattr(decoding, "prefill_left", 0)


def shares(needs: list[int], budget: int) -> list[int]:
    """Tokens each prompt being prefilled feeds this step: `budget` shared equally, a share larger than a prompt's
    need going to the others (water-filling), in order; the first always gets at least one token (progress)."""
    out = [0] * len(needs)
    left = max(budget, 1 if needs else 0)
    for rank, i in enumerate(sorted(range(len(needs)), key=lambda i: needs[i])):
        out[i] = min(needs[i], left // (len(needs) - rank))
        left -= out[i]
    if needs and not any(out):
        out[0] = min(needs[0], max(budget, 1))
    return out
