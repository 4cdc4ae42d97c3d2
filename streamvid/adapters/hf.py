"""What every transformers video-LLM adapter shares: loading, text prefill, chunk prefill onto a cache, the manual
greedy decode loop, yes/no probes (single and batched) and the model's own retrieval vectors.

A family's module subclasses `HFVideoAdapter` and says only what differs: the model types it loads, its chat
text (`sink_text`, `prompt`, stop tokens), how a chunk of frames becomes tokens, vision inputs and positions
(`chunk_inputs`), and whether positions are 3-D M-RoPE or 1-D RoPE (`position_axes`).

Nothing here relies on state the HF model keeps between calls (`rope_deltas`): every forward gets explicit
`position_ids`. The model is shared by the ingest and reasoning threads; `lock` is held around each forward, so a
long answer interleaves with ingest one decode step at a time.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.utils import logging as hf_logging

from streamvid.budget import DTYPE_BYTES, KVShape
from streamvid.positions import RopePositions
from streamvid.types import Context, Encoded

REGION_SIDE = 4  # a block's region vectors: its video tokens pooled onto at most 4 x 4 regions of the frame
SYSTEM_PROMPT = "You are a helpful assistant watching a live video stream. Answer briefly from what you saw."


@dataclass(frozen=True)
class ChunkInputs:
    """One chunk as the model takes it: token ids, positions relative to the chunk's first position, the vision
    inputs of the forward, and which tokens carry video features."""

    ids: torch.Tensor  # (1, n) token ids
    positions: torch.Tensor  # (3, 1, n) for M-RoPE or (1, n) for 1-D RoPE, starting at 0
    pos_span: int  # positions the chunk occupies: the next segment starts at pos_start + pos_span
    vision: dict = field(default_factory=dict)  # extra forward kwargs (pixel values, grids), on the model's device
    video_mask: torch.Tensor | None = None  # (n,) bool: the video-feature tokens (the block's retrieval vector)
    grid: tuple[int, int, int] | None = None  # (frames, rows, columns) of the video tokens, when they form one


class HFVideoAdapter:
    """See `VideoLLMAdapter`. Thread contract: all public methods are safe from any thread."""

    model_types: tuple[str, ...] = ()  # config.model_type values this adapter loads
    position_axes = 3  # 3: M-RoPE position ids (3, B, L); 1: 1-D RoPE position ids (B, L)
    frames_per_chunk_multiple = 1
    uses_stream_time = False  # True: encode_chunk writes the chunk's stream time into its tokens (t_start_s)
    stop_tokens: tuple[str, ...] = ()  # tokens that end an answer, besides the tokenizer's eos

    def __init__(self, model: str, device: str = "cpu", dtype: str = "auto", index_layer: int = 0,
                 trust_remote_code: bool = False, device_map: str | None = None, attn: str = "auto",
                 prebuilt: tuple | None = None):
        """`model`: an HF id or checkpoint directory, loaded with `from_pretrained`; or, with `prebuilt`
        (processor, model) already built (random_arch.py), only its name."""
        hf_logging.disable_progress_bar()
        device = resolve_device(device)
        dtype = resolve_dtype(dtype, device)
        attn = resolve_attn(attn, device, dtype)
        load = {"dtype": getattr(torch, dtype), "attn_implementation": attn, "trust_remote_code": trust_remote_code}
        if device_map is not None:  # accelerate spreads the layers over the devices (and the host) that hold them
            load["device_map"] = device_map
        try:
            if prebuilt is not None:
                self.processor, self.model = prebuilt
            else:
                self.processor = AutoProcessor.from_pretrained(model, trust_remote_code=trust_remote_code)
                self.model = AutoModelForImageTextToText.from_pretrained(model, **load)
        except OSError as e:
            kind = "directory" if Path(model).exists() else "model id (check the id, or the network / hub cache)"
            raise ValueError(f"cannot load model {model!r} as a {kind}: {str(e).splitlines()[0]}") from e
        except ImportError as e:  # device_map needs accelerate, flash_attention_2 needs flash-attn
            raise ValueError(f"cannot load model {model!r}: {str(e).splitlines()[0]}") from e
        self.attn = attn
        cfg = self.model.config
        if cfg.model_type not in self.model_types:
            raise ValueError(f"{type(self).__name__} loads {', '.join(self.model_types)}, got {cfg.model_type!r}")
        if device_map is None:
            self.model.to(device)
        self.model.eval()
        # where inputs go: the device of the input embeddings (with a device_map, each layer's cache stays on the
        # device of its layer; blocks keep their tensors where they were made)
        self.device = (self.model.get_input_embeddings().weight.device if device_map is not None
                       else torch.device(device))
        self.dtype = getattr(torch, dtype)
        self.lock = threading.RLock()
        self.tokenizer = self.processor.tokenizer
        self.video_processor = self.processor.video_processor
        text_cfg = cfg.get_text_config()
        self._lm = self.model.model.language_model
        n_layers = text_cfg.num_hidden_layers
        if not 0 <= index_layer < n_layers:
            raise ValueError(f"index_layer must be in [0, {n_layers}), got {index_layer}")
        self.index_layer = index_layer
        self._attn = self._lm.layers[index_layer].self_attn
        self.kv_heads = text_cfg.num_key_value_heads
        self._heads = text_cfg.num_attention_heads
        self.head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // self._heads
        self.index_dim = self.kv_heads * self.head_dim
        self.kv_shape = KVShape(n_layers, self.kv_heads, self.head_dim, DTYPE_BYTES[dtype])
        self.positions = RopePositions(self._lm.rotary_emb.inv_freq.detach().float().cpu(), self.position_axes)
        unk = self.tokenizer.unk_token_id
        stops = [self.tokenizer.convert_tokens_to_ids(t) for t in self.stop_tokens] + [self.tokenizer.eos_token_id]
        self.stop_ids = {i for i in stops if i is not None and i >= 0 and i != unk}
        yes, no = self._word_ids(["yes", "Yes", " yes", " Yes"]), self._word_ids(["no", "No", " no", " No"])
        self._yes_ids, self._no_ids = sorted(yes - no), sorted(no - yes)  # a shared first token says nothing

    @property
    def rope_inv_freq(self) -> torch.Tensor:
        return self.positions.inv_freq

    # ---- what a family defines --------------------------------------------------------------------------
    @property
    def sink_text(self) -> str:
        raise NotImplementedError

    def prompt(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str:
        raise NotImplementedError

    def chunk_inputs(self, frames: Sequence[np.ndarray], seconds_per_chunk: float,
                     t_start_s: float = 0.0) -> ChunkInputs:
        raise NotImplementedError

    def tokens_per_chunk(self, height: int, width: int, frames: int) -> int:
        """Tokens of one chunk of `frames` frames of height x width, as the processor turns them into tokens."""
        blank = [np.zeros((height, width, 3), np.uint8)] * frames
        return int(self.chunk_inputs(blank, 1.0).ids.shape[1])

    # ---- encoding ---------------------------------------------------------------------------------------
    def encode_text(self, text: str, past: Context | None = None) -> Encoded:
        ids = self.token_ids(text)
        start = past.next_pos if past is not None else 0
        with self.lock, torch.inference_mode():
            cache = self.forward(ids, self.text_positions(start, ids.shape[1]), past)[1]
        keys, values = self._tail(cache, ids.shape[1])
        return Encoded(keys, values, ids.shape[1], None)

    def encode_chunk(self, frames: Sequence[np.ndarray], past: Context, seconds_per_chunk: float,
                     t_start_s: float = 0.0) -> Encoded:
        """The chunk's KV on top of `past`, and its retrieval vectors: the mean pre-RoPE key of its video tokens at
        the index layer, and the same per region of the frame (`region_keys`). `t_start_s`, the stream time of the
        chunk's first frame, is used by adapters whose tokens carry time (`uses_stream_time`)."""
        if len(frames) % self.frames_per_chunk_multiple:
            raise ValueError(f"a chunk needs a multiple of {self.frames_per_chunk_multiple} frames, got {len(frames)}")
        chunk = self.chunk_inputs(frames, seconds_per_chunk, t_start_s)
        with self.lock, torch.inference_mode(), self._capture("k") as captured, self._decoder_inputs() as embeds:
            cache = self.forward(chunk.ids, chunk.positions + past.next_pos, past, **chunk.vision)[1]
        keys, values = self._tail(cache, chunk.ids.shape[1])
        mask = chunk.video_mask.to(captured[0].device)
        pre_rope_keys = captured[0][0][mask].float()  # (n_video, kv_heads*head_dim)
        scene = embeds[0][0][mask.to(embeds[0].device)].to(torch.float16).cpu().numpy() if embeds else None
        return Encoded(keys, values, chunk.pos_span, _unit(pre_rope_keys.mean(0)), scene,
                       region_keys(pre_rope_keys, chunk.grid))

    def question_vector(self, text: str) -> np.ndarray:
        """Mean pre-RoPE query of the question's tokens at the index layer, heads averaged within each KV group,
        so it lives in the same space as the blocks' mean pre-RoPE keys. The forward stops at that layer."""
        ids = self.token_ids(text)
        with self.lock, torch.inference_mode():
            q = mean_queries(self.model, [ids[0].tolist()], self.index_layer, self.device, self.position_axes)[0]
        return _unit(q)

    # ---- answering --------------------------------------------------------------------------------------
    def generate(self, context: Context, prompt: str, max_new_tokens: int,
                 stop: threading.Event | None = None) -> Iterator[str]:
        """Prefill `prompt` after `context` and decode greedily, yielding one text piece per generated token."""
        out: list[int] = []
        shown = ""
        for token in self.generate_ids(context, prompt, max_new_tokens, stop):
            out.append(token)
            text = self.tokenizer.decode(out, skip_special_tokens=True)
            piece = "" if text.endswith("\ufffd") else text[len(shown):]  # "" while a character is incomplete
            shown += piece
            yield piece

    def generate_ids(self, context: Context, prompt: str, max_new_tokens: int,
                     stop: threading.Event | None = None) -> Iterator[int]:
        """The greedy token ids after `prompt` on `context`, up to a stop token (not yielded)."""
        ids = self.token_ids(prompt)
        pos = context.next_pos
        cache = None
        for _ in range(max_new_tokens):
            if stop is not None and stop.is_set():
                return
            with self.lock, torch.inference_mode():
                # the first forward copies the context into a buffer with room for the prompt and every new
                # token; each later step writes its own token's K/V in place (_BufferLayer)
                logits, cache = self.forward(ids, self.text_positions(pos, ids.shape[1]),
                                              context if cache is None else None, cache=cache,
                                              spare=ids.shape[1] + max_new_tokens)
            pos += ids.shape[1]
            token = int(logits[0, -1].argmax())
            if token in self.stop_ids:
                return
            yield token
            ids = torch.tensor([[token]])

    def probe(self, context: Context, question: str) -> float:
        """p(yes) / (p(yes) + p(no)) for the first answer token after `question`."""
        ids = self.token_ids(self.prompt(question))
        with self.lock, torch.inference_mode():
            logits = self.forward(ids, self.text_positions(context.next_pos, ids.shape[1]), context)[0]
        p = torch.softmax(logits[0, -1].float(), dim=-1)
        yes, no = float(p[self._yes_ids].sum()), float(p[self._no_ids].sum())
        return yes / (yes + no) if yes + no > 0 else 0.5

    def probe_many(self, context: Context, questions: Sequence[str]) -> list[float]:
        """`probe` for several questions on one context in a single batched forward.

        The prompts are left-padded to one length, so every row's last position is its answer position; the
        context enters the cache expanded over the rows (DynamicCache's first update concatenates the prompts to
        it, which writes one copy of the context per row) and an attention mask hides the padding. Each prompt
        keeps the positions it has alone (context.next_pos onwards), so the result equals `probe`."""
        if not questions:
            return []
        rows = [self.token_ids(self.prompt(q))[0].tolist() for q in questions]
        n, width = len(rows), max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else rows[0][0]
        ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, context.n_tokens + width), dtype=torch.long)
        mask[:, :context.n_tokens] = 1
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r)
            mask[i, context.n_tokens + width - len(r):] = 1
        positions = self.positions.batch_ids([context.next_pos] * n, [len(r) for r in rows], width)
        data = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in zip(context.keys, context.values)]
        with self.lock, torch.inference_mode():
            cache = DynamicCache(ddp_cache_data=data if context.n_tokens else None, config=self.model.config)
            logits = self.model(input_ids=ids.to(self.device), position_ids=positions.to(self.device),
                                attention_mask=mask.to(self.device), cache=cache, use_cache=True,
                                logits_to_keep=1).logits
        p = torch.softmax(logits[:, -1].float(), dim=-1)  # (n, vocab)
        yes, no = p[:, self._yes_ids].sum(-1), p[:, self._no_ids].sum(-1)
        return [float(y / (y + n_)) if y + n_ > 0 else 0.5 for y, n_ in zip(yes, no)]

    # ---- internals --------------------------------------------------------------------------------------
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, past: Context | None,
                 cache: DynamicCache | None = None, use_cache: bool = True, spare: int | None = None,
                 **vision) -> tuple[torch.Tensor, DynamicCache]:
        """Logits of the last position and the cache after `ids`. Without `cache`, one is made from `past`: its K/V
        copied once into buffers with room for `spare` more tokens (default: these ids), which this forward and
        later ones on the returned cache fill in place."""
        if cache is None and use_cache:
            cache = _cache(self.model.config, past, ids.shape[1] if spare is None else spare)
        out = self.model(input_ids=ids.to(self.device), position_ids=positions.to(self.device), cache=cache,
                         use_cache=use_cache, logits_to_keep=1, **vision)
        return out.logits, cache

    def _tail(self, cache: DynamicCache, n: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        keys = tuple(layer.keys[:, :, -n:].clone() for layer in cache.layers)
        values = tuple(layer.values[:, :, -n:].clone() for layer in cache.layers)
        return keys, values

    @contextmanager
    def _capture(self, which: str):
        captured: list[torch.Tensor] = []
        proj = self._attn.k_proj if which == "k" else self._attn.q_proj
        handle = proj.register_forward_hook(lambda _m, _i, out: captured.append(out.detach()))
        try:
            yield captured
        finally:
            handle.remove()

    @contextmanager
    def _decoder_inputs(self):
        """The input embeddings the decoder receives (vision tokens already in place), as a one-item list."""
        captured: list[torch.Tensor] = []

        def grab(_m, args, kwargs):
            x = kwargs.get("inputs_embeds")
            if x is not None:
                captured.append(x.detach())

        handle = self._lm.register_forward_pre_hook(grab, with_kwargs=True)
        try:
            yield captured
        finally:
            handle.remove()

    def token_ids(self, text: str) -> torch.Tensor:
        return torch.tensor([self.tokenizer.encode(text, add_special_tokens=False)])

    def text_positions(self, start: int, n: int) -> torch.Tensor:
        return self.positions.text_ids(start, n)

    def _word_ids(self, words: list[str]) -> set[int]:
        return {self.tokenizer.encode(w, add_special_tokens=False)[0] for w in words}

    def _to_model(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.device, self.dtype) if x.is_floating_point() else x.to(self.device)


def resolve_device(device: str) -> str:
    """"auto": the first CUDA device when there is one, else the CPU; anything else as given ("cpu", "cuda:1")."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


DTYPES = ("auto", "bfloat16", "float16", "float32")


def resolve_dtype(dtype: str, device: str) -> str:
    """"auto": bfloat16 on a CUDA device that supports it (float16 on older ones), float32 elsewhere."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    if not device.startswith("cuda"):
        return "float32"
    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


ATTN = ("auto", "sdpa", "flash_attention_2", "eager")


def resolve_attn(attn: str, device: str, dtype: str) -> str:
    """"auto": flash-attention 2 on CUDA in bfloat16/float16 when the flash-attn package is installed, else
    PyTorch's scaled-dot-product attention (SDPA)."""
    import importlib.util

    if attn not in ATTN:
        raise ValueError(f"attn must be one of {', '.join(ATTN)}, got {attn!r}")
    if attn != "auto":
        return attn
    if device.startswith("cuda") and dtype != "float32" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


class ChatMLAdapter(HFVideoAdapter):
    """The ChatML turn format (`<|im_start|>role ... <|im_end|>`) of the Qwen-VL chat templates, also used by
    LLaVA-OneVision's Qwen2 language model: the video sits in the user turn, after the system prompt."""

    stop_tokens = ("<|im_end|>", "<|endoftext|>")

    @property
    def sink_text(self) -> str:
        return f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n"

    def prompt(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str:
        """Text that follows the video in the context: earlier turns, then the question and the answer header."""
        turns = "".join(f"{q}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n<|im_start|>user\n"
                        for q, a in dialogue)
        return f"{turns}{question}<|im_end|>\n<|im_start|>assistant\n"


def _cache(config, past: Context | None, spare: int) -> DynamicCache:
    """A DynamicCache holding `past`, its full-attention layers on _BufferLayer with room for `spare` more tokens:
    in the caller's buffer when `past.room` has it, else in a copy (other layer kinds, and an empty past, as
    DynamicCache makes them)."""
    cache = DynamicCache(config=config)
    if past is None or not past.n_tokens:
        return cache
    for i, (k, v) in enumerate(zip(past.keys, past.values, strict=True)):
        if type(cache.layers[i]) is DynamicLayer:
            cache.layers[i] = _BufferLayer(k, v, spare, past.room)
        else:
            cache.layers[i].update(k, v)
    return cache


class _BufferLayer(DynamicLayer):
    """A full-attention cache layer on preallocated buffers: `update` writes the new tokens' K/V after the cached
    ones, in place, and returns views of the filled part (a full buffer grows to twice its size). So a context is
    copied once, where DynamicLayer concatenates the whole cache again on every forward (every decoded token).

    The returned K/V are views of buffers this layer writes on later updates: a caller that keeps them beyond the
    next update copies them (HFAdapter._tail clones a new block's K/V).

    With `room` >= `spare` (Context.room: `keys` and `values` are views into a caller's buffer with that many free
    tokens after them) the layer works in that buffer and copies nothing."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, spare: int, room: int = 0):
        super().__init__()
        n = keys.shape[-2]
        # (batch, kv_heads, capacity, head_dim): the caller's buffer, or a copy of the context with room after it
        if room >= spare:
            self._k, self._v = (_extended(t, n + room) for t in (keys, values))
        else:
            self._k, self._v = (_grown(t, n, n + spare) for t in (keys, values))
        self._n = n  # tokens filled
        self.device = keys.device
        self.is_initialized = True
        self._expose()

    def _expose(self) -> None:
        self.keys, self.values = self._k[..., :self._n, :], self._v[..., :self._n, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self._n + key_states.shape[-2]
        if end > self._k.shape[-2]:
            self._k, self._v = (_grown(b, self._n, max(end, 2 * b.shape[-2])) for b in (self._k, self._v))
        self._k[..., self._n:end, :].copy_(key_states)
        self._v[..., self._n:end, :].copy_(value_states)
        self._n = end
        self._expose()
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last -`tokens_to_remove` tokens (a negative count), as DynamicLayer.crop; their room is reused."""
        super().crop(tokens_to_remove)  # checks the argument as DynamicLayer does
        self._n = self.keys.shape[-2]
        self._expose()


def _extended(view: torch.Tensor, tokens: int) -> torch.Tensor:
    """The view (batch, kv_heads, n, head_dim) of a buffer, extended to `tokens` along dim 2 into the free room that
    follows it in the same buffer (same strides: each head's row of the buffer goes on there)."""
    if view.stride(-1) != 1 or view.stride(-2) != view.shape[-1]:
        raise ValueError("a context with room must be a token-range view of a (batch, kv_heads, capacity, head_dim) "
                         "buffer")
    return view.as_strided((*view.shape[:-2], tokens, view.shape[-1]), view.stride(), view.storage_offset())


def _grown(buf: torch.Tensor, filled: int, capacity: int) -> torch.Tensor:
    out = buf.new_empty((*buf.shape[:-2], capacity, buf.shape[-1]))
    out[..., :filled, :].copy_(buf[..., :filled, :])
    return out


class _StopForward(Exception):
    """Raised from a hook to end a forward once the layer of interest has run its projection."""


def mean_queries(model, texts: Sequence[Sequence[int]], layer: int, device: torch.device | str = "cpu",
                 axes: int = 3) -> torch.Tensor:
    """(n, kv_heads * head_dim): per text (token ids), the mean pre-RoPE query at decoder `layer`, heads averaged
    within each KV group (the space of the mean pre-RoPE keys that index the blocks). The forward runs the layers
    below `layer` and stops at its q_proj: no later layers, no LM head. Differentiable: training uses it too.
    `axes`: 3 for M-RoPE models (position ids (3, 1, n)), 1 for 1-D RoPE."""
    cfg = model.config.get_text_config()
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    proj = model.model.language_model.layers[layer].self_attn.q_proj
    captured: list[torch.Tensor] = []

    def stop(_m, _i, out):
        captured.append(out)
        raise _StopForward

    handle = proj.register_forward_hook(stop)
    out = []
    try:
        for ids in texts:
            captured.clear()
            n = len(ids)
            pos = torch.arange(n, device=device).view(1, n)
            try:
                model(input_ids=torch.tensor([list(ids)], device=device),
                      position_ids=pos.view(1, 1, n).expand(3, 1, n) if axes == 3 else pos, use_cache=False)
            except _StopForward:
                pass
            q = captured[0][0].float().mean(0)  # (heads * head_dim,)
            out.append(q.view(kv, heads // kv, head_dim).mean(1).reshape(-1))
    finally:
        handle.remove()
    return torch.stack(out)


def region_keys(keys: torch.Tensor, grid: tuple[int, int, int] | None, side: int = REGION_SIDE) -> np.ndarray:
    """(n_regions, dim) float32 unit rows: `region_pool` of a chunk's (n_video, dim) pre-RoPE keys."""
    regions = region_pool(keys.float(), grid, side).cpu().numpy().astype(np.float32)
    return regions / np.linalg.norm(regions, axis=1, keepdims=True).clip(1e-12)


def region_pool(keys: torch.Tensor, grid: tuple[int, int, int] | None, side: int = REGION_SIDE) -> torch.Tensor:
    """(n_regions, dim) from a chunk's (n_video, dim) keys: averaged over the chunk's frames and pooled onto at
    most `side` x `side` regions of the token grid (the grid itself when it is that small: one row per token);
    without a grid, over at most side**2 runs of consecutive tokens. Differentiable (training uses it too)."""
    if grid is not None and math.prod(grid) == keys.shape[0]:
        frames, rows, cols = grid
        cells = keys.reshape(frames, rows, cols, -1).mean(0).permute(2, 0, 1)  # (dim, rows, cols)
        pooled = torch.nn.functional.adaptive_avg_pool2d(cells, (min(rows, side), min(cols, side)))
        return pooled.flatten(1).T
    return torch.stack([run.mean(0) for run in torch.tensor_split(keys, min(len(keys), side * side))])


def _unit(v: torch.Tensor) -> np.ndarray:
    v = v.float().cpu().numpy().astype(np.float32)
    return v / max(float(np.linalg.norm(v)), 1e-12)
