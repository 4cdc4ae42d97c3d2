"""Batched forwards over rows of different streams, for a scheduler that gathers work from many streams: chunk
encodes (`encode_chunks`), yes/no probes (`probe_rows`) and greedy decoding (`Decoding`, `decode`). Each gives, per
row, what the adapter's single-row call gives (float tolerance), with one language-model forward for all rows.

Layout of a batched forward over B rows, each with its own context (K/V, next_pos) and its own new tokens:

    cache columns     [ contexts, right-aligned in K columns | new tokens, left-padded to W columns ]
    attention mask    1 on each row's real context tokens and real new tokens, 0 on the padding
    position ids      each row's own (its next_pos onwards); the padding repeats the row's first position

The padding's K/V are zeros (contexts) or a pad token's (new tokens), always finite, and the mask hides them; the
causal mask and the padding mask together leave each row exactly its own tokens, so a row computes what it computes
alone. (A padding query with no key to see, before the new tokens of a row with an empty context, gets zeros from
SDPA and uniform weights from eager: finite, and no real token reads it.) Left-padding the new tokens puts every
row's last token in the last column (logits_to_keep=1). The mask is a 2-D (B, K + W) one: transformers builds from
it the mask each attention implementation takes (boolean for SDPA, additive for eager; flash-attention 2 unpads by
it). A single row takes the single-row path unchanged: no padding, no mask, the context's own buffer room used as
`HFVideoAdapter.forward` does.

Thread contract: no state on the adapter; the adapter's `lock` is held around each forward. One `Decoding` is
advanced by one thread at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from streamvid.adapters.chunk_inputs import ChunkInputs
from streamvid.adapters.kv_cache import BufferLayer, buffered_cache, install_state, kv_layers, kv_of, state_of
from streamvid.adapters.vectors import region_keys, unit
from streamvid.kv.recurrent_state import RecurrentState
from streamvid.types import ChunkJob, Context, Encoded


class BatchedAdapter(Protocol):
    """What the batched forwards use of an adapter: adapters/hf.py's HFVideoAdapter, which calls them."""

    model: Any  # the transformers model (its config builds the caches)
    language_model: Any  # its decoder (the index layer's key projection)
    tokenizer: Any
    device: torch.device
    lock: AbstractContextManager[bool]  # held around each forward
    kv_heads: int
    head_dim: int
    frames_per_chunk_multiple: int
    yes_ids: list[int]
    no_ids: list[int]
    stop_ids: set[int]

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, past: Context | None,
                cache: DynamicCache | None = None, use_cache: bool = True, spare: int | None = None,
                mask: torch.Tensor | None = None, **vision) -> tuple[torch.Tensor, DynamicCache]: ...

    def chunk_inputs_batch(self, clips: Sequence[tuple[Sequence[np.ndarray], float, float]]) -> list[ChunkInputs]: ...

    def capture(self, which: str) -> AbstractContextManager[list[torch.Tensor]]: ...

    def decoder_inputs(self) -> AbstractContextManager[list[torch.Tensor]]: ...

    def prompt(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str: ...

    def token_ids(self, text: str) -> torch.Tensor: ...

    def text_positions(self, start: int, n: int) -> torch.Tensor: ...


# ---- layout ---------------------------------------------------------------------------------------------------
def pad_id(adapter: BatchedAdapter) -> int:
    """A token for the left padding: the tokenizer's pad token, else its eos; never a video token."""
    tok = adapter.tokenizer
    for i in (tok.pad_token_id, tok.eos_token_id, 0):
        if i is not None and i != getattr(adapter, "video_pad_id", None):
            return int(i)
    return 1


def stack_ids(adapter: BatchedAdapter, ids: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """(B, width): each row's (n,) ids right-aligned, left-padded with `pad_id`."""
    out = torch.full((len(ids), width), pad_id(adapter), dtype=torch.long)
    for r, row in enumerate(ids):
        out[r, width - row.shape[-1]:] = row.reshape(-1)
    return out


def stack_positions(positions: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """Rows' position ids, each (..., 1, n) ((3, 1, n) M-RoPE, (1, n) RoPE), right-aligned in (..., B, width); a
    row's padding repeats its first position."""
    lead = positions[0].shape[:-2]
    out = torch.zeros((*lead, len(positions), width), dtype=torch.long)
    for r, p in enumerate(positions):
        n = p.shape[-1]
        out[..., r, width - n:] = p[..., 0, :]
        out[..., r, :width - n] = p[..., 0, :1]
    return out


def right_aligned_cache(adapter: BatchedAdapter, pasts: Sequence[Context], spare: int) -> DynamicCache:
    """A DynamicCache of batch len(pasts): each row's context right-aligned in max(n_tokens) columns, zeros before
    it, with room for `spare` more columns (full-attention layers on `BufferLayer`: later forwards write in
    place). A hybrid model's rows: K/V in its attention layers, the rows' recurrent states stacked into its linear
    layers (copies)."""
    width = max(p.n_tokens for p in pasts)
    cache = DynamicCache(config=adapter.model.config)
    if any(p.state is not None for p in pasts):
        install_state(cache, RecurrentState.stack([p.state for p in pasts]))
    for j, i in enumerate(kv_layers(cache)):
        layer = cache.layers[i]
        like = next((p.keys[j] for p in pasts if p.n_tokens), None)
        if like is None:  # every context empty: the layer's own dtype and device
            weight = adapter.language_model.layers[i].self_attn.k_proj.weight
            like = weight.new_empty((1, adapter.kv_heads, 0, adapter.head_dim))
        buffered = type(layer) is DynamicLayer
        shape = (len(pasts), like.shape[1], width + (spare if buffered else 0), like.shape[3])
        k, v = like.new_zeros(shape), like.new_zeros(shape)
        for r, p in enumerate(pasts):
            if n := p.n_tokens:
                k[r, :, width - n:width].copy_(p.keys[j][0])
                v[r, :, width - n:width].copy_(p.values[j][0])
        if buffered:
            cache.layers[i] = BufferLayer(k[..., :width, :], v[..., :width, :], spare, room=spare)
        elif width:
            layer.update(k, v)
    return cache


def context_mask(pasts: Sequence[Context], capacity: int, device) -> torch.Tensor:
    """(B, capacity) long: 1 on each row's context columns (right-aligned in max(n_tokens)), 0 elsewhere."""
    width = max(p.n_tokens for p in pasts)
    mask = torch.zeros((len(pasts), capacity), dtype=torch.long)
    for r, p in enumerate(pasts):
        mask[r, width - p.n_tokens:width] = 1
    return mask.to(device)


def prefill_rows(adapter: BatchedAdapter, pasts: Sequence[Context], ids: Sequence[torch.Tensor],
                 positions: Sequence[torch.Tensor], **vision) -> tuple[torch.Tensor, DynamicCache, int]:
    """One forward of each row's new `ids` ((1, n) or (n,)) at its `positions` on its own context: (B, 1, vocab)
    logits of each row's last token, the cache, and W (the new columns, the last of the cache; row r's are its
    last n_r). One row: `adapter.forward` as the single-row methods call it."""
    if len(ids) == 1:
        row = ids[0].reshape(1, -1)
        logits, cache = adapter.forward(row, positions[0], pasts[0], **vision)
        return logits, cache, row.shape[1]
    width = max(row.shape[-1] for row in ids)
    cache = right_aligned_cache(adapter, pasts, width)
    k = max(p.n_tokens for p in pasts)
    mask = context_mask(pasts, k + width, adapter.device)
    for r, row in enumerate(ids):
        mask[r, k + width - row.shape[-1]:] = 1
    logits, cache = adapter.forward(stack_ids(adapter, ids, width), stack_positions(positions, width), None,
                                    cache=cache, mask=mask, **vision)
    return logits, cache, width


# ---- chunk encodes --------------------------------------------------------------------------------------------
def encode_chunks(adapter: BatchedAdapter, jobs: Sequence[ChunkJob], same_width: bool = False) -> list[Encoded]:
    """`HFVideoAdapter.encode_chunks`: the chunks' inputs in one `chunk_inputs_batch` (one video-processor call for
    the Qwen families), then one forward per group of jobs whose vision inputs concatenate along dim 0 (all of
    them for the Qwen families, whose pixel rows and grids always do; for the LLaVA families, the clips of one
    frame count, as the processor resizes every frame to one size). `same_width`: a forward's rows also have as
    many new tokens each (no padding among them: what a hybrid model's linear layers need, adapters/qwen3_5.py)."""
    if not jobs:
        return []
    for job in jobs:
        if len(job.frames) % adapter.frames_per_chunk_multiple:
            raise ValueError(f"a chunk needs a multiple of {adapter.frames_per_chunk_multiple} frames, "
                             f"got {len(job.frames)}")
    chunks = adapter.chunk_inputs_batch([(job.frames, job.seconds_per_chunk, job.t_start_s) for job in jobs])
    groups: dict[tuple, list[int]] = {}
    for i, chunk in enumerate(chunks):
        width = (int(chunk.ids.shape[1]),) if same_width else ()
        groups.setdefault((*vision_key(chunk.vision), *width), []).append(i)
    out: list[Encoded | None] = [None] * len(jobs)
    for rows in groups.values():
        for i, enc in zip(rows, _encode_group(adapter, [jobs[i].past for i in rows], [chunks[i] for i in rows])):
            out[i] = enc
    return out


def vision_key(vision: dict) -> tuple:
    """Vision inputs with the same key concatenate along dim 0 into one forward's inputs."""
    return tuple(sorted((name, tuple(t.shape[1:])) for name, t in vision.items()))


def _encode_group(adapter: BatchedAdapter, pasts: Sequence[Context], chunks: Sequence[ChunkInputs]) -> list[Encoded]:
    ids = [c.ids for c in chunks]
    positions = [c.positions + p.next_pos for c, p in zip(chunks, pasts)]
    vision = chunks[0].vision if len(chunks) == 1 else {
        name: torch.cat([c.vision[name] for c in chunks]) for name in chunks[0].vision}
    with (adapter.lock, torch.inference_mode(), adapter.capture("k") as captured,
          adapter.decoder_inputs() as embeds):
        _, cache, width = prefill_rows(adapter, pasts, ids, positions, **vision)
    out = []
    for r, chunk in enumerate(chunks):
        n = chunk.ids.shape[1]  # the row's real new tokens: the last n columns of the cache and of the forward
        keys = tuple(layer.keys[r:r + 1, :, -n:].clone() for layer in kv_of(cache))
        values = tuple(layer.values[r:r + 1, :, -n:].clone() for layer in kv_of(cache))
        new = slice(width - n, width)
        mask = chunk.video_mask.to(captured[0].device)
        pre_rope_keys = captured[0][r, new][mask].float()  # (n_video, kv_heads*head_dim)
        scene = (embeds[0][r, new][mask.to(embeds[0].device)].to(torch.float16).cpu().numpy()
                 if embeds else None)
        out.append(Encoded(keys, values, chunk.pos_span, unit(pre_rope_keys.mean(0)), scene,
                           region_keys(pre_rope_keys, chunk.grid), state_of(cache, r)))
    return out


# ---- probes ---------------------------------------------------------------------------------------------------
def probe_rows(adapter: BatchedAdapter, rows: Sequence[tuple[Context, str]]) -> list[float]:
    """`HFVideoAdapter.probe_rows`: p(yes) / (p(yes) + p(no)) after each question on its own context, one
    forward."""
    if not rows:
        return []
    pasts = [context for context, _ in rows]
    ids = [adapter.token_ids(adapter.prompt(question)) for _, question in rows]
    positions = [adapter.text_positions(c.next_pos, i.shape[1]) for c, i in zip(pasts, ids)]
    with adapter.lock, torch.inference_mode():
        logits = prefill_rows(adapter, pasts, ids, positions)[0]
    p = torch.softmax(logits[:, -1].float(), dim=-1)  # (B, vocab)
    yes, no = p[:, adapter.yes_ids].sum(-1).tolist(), p[:, adapter.no_ids].sum(-1).tolist()
    return [y / (y + n) if y + n > 0 else 0.5 for y, n in zip(yes, no)]


# ---- greedy decoding ------------------------------------------------------------------------------------------
class Decoding:
    """One answer being generated greedily on its context (`HFVideoAdapter.start_decoding`), advanced one token per
    `decode` call, alone or batched with other streams' answers.

    Between calls its K/V (context, prompt, tokens fed so far) live in its row of the batched cache of the last
    `decode` that advanced it (`_Batch`). The next call given the same decodings appends one column per row to that
    cache; a call given another set (one finished or was cancelled, one joined) builds a new cache from each row's
    own K/V: its context before its first step, else its row's real columns (the mask's) in its last batch, which
    no call writes any more."""

    def __init__(self, adapter: BatchedAdapter, context: Context, prompt_ids: Sequence[int], max_new_tokens: int):
        if not prompt_ids:
            raise ValueError("a decoding needs a prompt of at least one token")
        self.adapter = adapter
        self.context = context
        self.prompt_ids = list(prompt_ids)
        self.max_new_tokens = max_new_tokens
        self.tokens: list[int] = []  # generated ids so far (the stop token not included)
        self.done = max_new_tokens <= 0  # after a stop token, max_new_tokens tokens, or cancel()
        # what `decode` reads and writes (the batch step's side of a decoding):
        self.batch: _Batch | None = None  # where its K/V are, once its first forward ran
        self.fed = 0  # ids fed so far: prompt pieces, then each generated token but the newest
        self.prefill_limit: int | None = None  # prompt tokens the next forward may feed (None: all that are left)
        self.added = False  # the last decode step appended a token
        self._seen = 0  # tokens whose text pieces were computed
        self._shown = ""
        self._piece = ""

    def piece(self) -> str:
        """The text piece of the token the last `decode` appended ("" while a character is incomplete, and when the
        step appended none: a stop token), as `generate` yields them."""
        if not self.added:
            return ""
        while self._seen < len(self.tokens):  # every piece in order: a piece is the text the tokens before lacked
            self._seen += 1
            text = self.adapter.tokenizer.decode(self.tokens[:self._seen], skip_special_tokens=True)
            self._piece = "" if text.endswith("\ufffd") else text[len(self._shown):]
            self._shown += self._piece
        return self._piece

    def cancel(self) -> None:
        """Stop here: frees its share of the cache; `done` becomes True."""
        self.done = True
        self.batch = None

    @property
    def prefill_left(self) -> int:
        """Prompt tokens not fed yet: while there are, a `decode` step feeds the next piece of the prompt (at most
        `prefill_limit` tokens: chunked prefill) and yields no token until the prompt's last piece."""
        return max(0, len(self.prompt_ids) - self.fed)

    def pending(self) -> list[int]:
        """The ids the next forward feeds: the prompt's next piece, then each generated token."""
        if left := self.prefill_left:
            return self.prompt_ids[self.fed:self.fed + min(left, self.prefill_limit or left)]
        return self.tokens[-1:]

    def next_pos(self) -> int:
        """The position of the next id fed."""
        return self.context.next_pos + self.fed

    def own_kv(self) -> Context:
        """Its K/V so far as a context of its own: the context before the first step, after it the real columns of
        its row in its batch's cache (context, prompt, the generated tokens fed)."""
        if self.batch is None:
            return self.context
        return self.batch.row_kv(self)


class _Batch:
    """The cache of a set of decodings advanced together: row r is members[r]; `mask` (B, capacity) marks the real
    columns (None for a single row: every column is real)."""

    def __init__(self, members: list[Decoding], cache: DynamicCache, mask: torch.Tensor | None, filled: int):
        self.members = members
        self.cache = cache
        self.mask = mask
        self.filled = filled  # columns in the cache

    def row_kv(self, d: Decoding) -> Context:
        r = next(i for i, m in enumerate(self.members) if m is d)
        layers = kv_of(self.cache)
        if self.mask is None:
            keys = tuple(layer.keys[r:r + 1] for layer in layers)
            values = tuple(layer.values[r:r + 1] for layer in layers)
        else:
            cols = self.mask[r, :self.filled].nonzero().squeeze(1)
            keys = tuple(layer.keys[r:r + 1, :, cols.to(layer.keys.device)] for layer in layers)
            values = tuple(layer.values[r:r + 1, :, cols.to(layer.values.device)] for layer in layers)
        return Context(keys, values, d.next_pos(), state=state_of(self.cache, r))


def decode(adapter: BatchedAdapter, decodings: Sequence[Decoding]) -> None:
    """`HFVideoAdapter.decode`: one forward advances every unfinished decoding by one token (a first step prefills
    its prompt and yields its first token)."""
    live = [d for d in decodings if not d.done]
    if not live:
        return
    if len({id(d) for d in live}) != len(live):
        raise ValueError("a decoding was passed twice")
    if any(d.adapter is not adapter for d in live):
        raise ValueError("a decoding of another adapter")
    with torch.inference_mode():
        batch = live[0].batch
        if batch is None or len(batch.members) != len(live) or any(d.batch is not batch for d in live):
            batch = new_batch(adapter, live)
        rows = batch.members
        ids = [torch.tensor(d.pending()) for d in rows]
        positions = [adapter.text_positions(d.next_pos(), len(i)) for d, i in zip(rows, ids)]
        width = max(len(i) for i in ids)
        if len(rows) == 1:
            input_ids, position_ids, mask = ids[0].view(1, -1), positions[0], None
        else:
            input_ids, position_ids = stack_ids(adapter, ids, width), stack_positions(positions, width)
            end = batch.filled + width
            if end > batch.mask.shape[1]:
                batch.mask = torch.cat([batch.mask, batch.mask.new_zeros((len(rows), end))], dim=1)
            if all(len(i) == width for i in ids):  # every row one new token: the common step
                batch.mask[:, batch.filled:end] = 1
            else:
                for r, i in enumerate(ids):
                    batch.mask[r, end - len(i):end] = 1
            mask = batch.mask[:, :end]
        with adapter.lock:
            logits = adapter.forward(input_ids, position_ids, None, cache=batch.cache, mask=mask)[0]
        batch.filled += width
        tokens = logits[:, -1].argmax(-1).tolist()
    for d, fed, token in zip(rows, ids, tokens):
        d.fed += len(fed)
        if d.prefill_left:  # a piece of the prompt: no token until its last piece
            d.added = False
            continue
        d.added = token not in adapter.stop_ids
        if d.added:
            d.tokens.append(token)
        if not d.added or len(d.tokens) >= d.max_new_tokens:
            d.cancel()


def new_batch(adapter: BatchedAdapter, rows: list[Decoding]) -> _Batch:
    """A cache for `rows`, from each one's own K/V, with room for its pending ids and the tokens it may still
    generate. A single row: `buffered_cache` (a context with room is written in place, as the single-row path does)."""
    pasts = [d.own_kv() for d in rows]
    spare = max(d.prefill_left or 1 for d in rows) + max(d.max_new_tokens - len(d.tokens) for d in rows)
    if len(rows) == 1:
        batch = _Batch(rows, buffered_cache(adapter.model.config, pasts[0], spare), None, pasts[0].n_tokens)
    else:
        filled = max(p.n_tokens for p in pasts)
        batch = _Batch(rows, right_aligned_cache(adapter, pasts, spare),
                       context_mask(pasts, filled + spare, adapter.device), filled)
    for d in rows:
        d.batch = batch
    return batch
