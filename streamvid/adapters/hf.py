"""What every transformers video-LLM adapter shares: loading, text prefill, chunk prefill onto a cache, greedy
decoding, yes/no probes and the model's own retrieval vectors. The batched forwards over rows of many streams
(`encode_chunks`, `probe_rows`, `decode`) are in batching.py; the single-row methods are their one-row case.

A family's module subclasses `HFVideoAdapter` and says only what differs: the model types it loads, its chat
text (`sink_text`, `prompt`, stop tokens), how a chunk of frames becomes tokens, vision inputs and positions
(`chunk_inputs`), and whether positions are 3-D M-RoPE or 1-D RoPE (`position_axes`).

Nothing here relies on state the HF model keeps between calls (`rope_deltas`): every forward gets explicit
`position_ids`. The model is shared by every stream of an engine (engine.py), whose scheduler batches their work
(adapters/batching.py); `lock` is held around each forward, for callers on other threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, DynamicCache
from transformers.utils import logging as hf_logging

from streamvid.adapters import batching
from streamvid.adapters.chunk_inputs import ChunkInputs
from streamvid.adapters.kv_cache import buffered_cache, kv_of, state_of
from streamvid.adapters.refusals import check_tokenizer
from streamvid.adapters.vectors import unit
from streamvid.kv.budget import DTYPE_BYTES, KVShape
from streamvid.kv.positions import RopePositions
from streamvid.types import ChunkJob, Context, Encoded

SYSTEM_PROMPT = "You are a helpful assistant watching a live video stream. Answer briefly from what you saw."


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
                check_tokenizer(self.processor.tokenizer, model)  # an empty vocabulary: refused before the weights
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
        self.language_model = decoder_of(self.model)
        n_layers = text_cfg.num_hidden_layers
        if not 0 <= index_layer < n_layers:
            raise ValueError(f"index_layer must be in [0, {n_layers}), got {index_layer}")
        # the layers with per-token K/V: every one, or a hybrid model's attention layers (not its linear ones)
        kinds = getattr(text_cfg, "layer_types", None) or ["full_attention"] * n_layers
        self.kv_layer_ids = [i for i, kind in enumerate(kinds) if kind != "linear_attention"]
        if index_layer not in self.kv_layer_ids:
            raise ValueError(f"index_layer {index_layer} of {model!r} is a linear-attention layer: retrieval vectors "
                             f"come from an attention layer ({', '.join(map(str, self.kv_layer_ids))})")
        self.index_layer = index_layer
        self._attn = self.language_model.layers[index_layer].self_attn
        self.kv_heads = text_cfg.num_key_value_heads
        self._heads = text_cfg.num_attention_heads
        self.head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // self._heads
        self.index_dim = self.kv_heads * self.head_dim
        self.kv_shape = KVShape(len(self.kv_layer_ids), self.kv_heads, self.head_dim, DTYPE_BYTES[dtype])
        inv_freq = self.language_model.rotary_emb.inv_freq.detach().float().cpu()
        self.positions = RopePositions(inv_freq, self.position_axes)
        unk = self.tokenizer.unk_token_id
        stops = [self.tokenizer.convert_tokens_to_ids(t) for t in self.stop_tokens] + [self.tokenizer.eos_token_id]
        self.stop_ids = {i for i in stops if i is not None and i >= 0 and i != unk}
        yes, no = self._word_ids(["yes", "Yes", " yes", " Yes"]), self._word_ids(["no", "No", " no", " No"])
        self.yes_ids, self.no_ids = sorted(yes - no), sorted(no - yes)  # a shared first token says nothing

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

    def chunk_inputs_batch(self, clips: Sequence[tuple[Sequence[np.ndarray], float, float]]) -> list[ChunkInputs]:
        """`chunk_inputs` of each (frames, seconds_per_chunk, t_start_s); a family may prepare them together."""
        return [self.chunk_inputs(frames, seconds, t_start_s) for frames, seconds, t_start_s in clips]

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
        return Encoded(keys, values, ids.shape[1], None, state=state_of(cache))

    def encode_chunk(self, frames: Sequence[np.ndarray], past: Context, seconds_per_chunk: float,
                     t_start_s: float = 0.0) -> Encoded:
        """The chunk's KV on top of `past`, and its retrieval vectors: the mean pre-RoPE key of its video tokens at
        the index layer, and the same per region of the frame (`region_keys`). `t_start_s`, the stream time of the
        chunk's first frame, is used by adapters whose tokens carry time (`uses_stream_time`)."""
        return self.encode_chunks([ChunkJob(tuple(frames), past, seconds_per_chunk, t_start_s)])[0]

    def encode_chunks(self, jobs: Sequence[ChunkJob]) -> list[Encoded]:
        """`encode_chunk` of each job (chunks of different streams, on their own contexts), batched: one forward
        for all jobs whose vision inputs stack (all, for the Qwen families; for the LLaVA families, one forward per
        frame count). See batching.encode_chunks."""
        return batching.encode_chunks(self, jobs)

    def question_vector(self, text: str) -> np.ndarray:
        """Mean pre-RoPE query of the question's tokens at the index layer, heads averaged within each KV group,
        so it lives in the same space as the blocks' mean pre-RoPE keys. The forward stops at that layer."""
        ids = self.token_ids(text)
        with self.lock, torch.inference_mode():
            q = mean_queries(self.model, [ids[0].tolist()], self.index_layer, self.device, self.position_axes)[0]
        return unit(q)

    # ---- answering --------------------------------------------------------------------------------------
    def generate(self, context: Context, prompt: str, max_new_tokens: int,
                 stop: threading.Event | None = None) -> Iterator[str]:
        """Prefill `prompt` after `context` and decode greedily, yielding one text piece per generated token."""
        decoding = self.start_decoding(context, prompt, max_new_tokens)
        for _ in self._steps(decoding, stop):
            yield decoding.piece()

    def generate_ids(self, context: Context, prompt: str, max_new_tokens: int,
                     stop: threading.Event | None = None) -> Iterator[int]:
        """The greedy token ids after `prompt` on `context`, up to a stop token (not yielded)."""
        decoding = self.start_decoding(context, prompt, max_new_tokens)
        for _ in self._steps(decoding, stop):
            yield decoding.tokens[-1]

    def _steps(self, decoding: batching.Decoding, stop: threading.Event | None) -> Iterator[None]:
        """`decode` the one decoding until done or `stop` is set (checked before each forward), once per token."""
        try:
            while not decoding.done and not (stop is not None and stop.is_set()):
                n = len(decoding.tokens)
                self.decode([decoding])
                if len(decoding.tokens) > n:
                    yield
        finally:
            decoding.cancel()

    def start_decoding(self, context: Context, prompt: str, max_new_tokens: int) -> batching.Decoding:
        """A greedy answer to `prompt` on `context`, advanced by `decode` (no forward yet)."""
        return batching.Decoding(self, context, self.token_ids(prompt)[0].tolist(), max_new_tokens)

    def decode(self, decodings: Sequence[batching.Decoding]) -> None:
        """One forward advances every unfinished decoding by one token (a first step prefills its prompt); done ones
        are ignored. See batching.decode."""
        batching.decode(self, decodings)

    def probe(self, context: Context, question: str) -> float:
        """p(yes) / (p(yes) + p(no)) for the first answer token after `question`."""
        return self.probe_rows([(context, question)])[0]

    def probe_many(self, context: Context, questions: Sequence[str]) -> list[float]:
        """`probe` for several questions on one context in a single batched forward."""
        return self.probe_rows([(context, q) for q in questions])

    def probe_rows(self, rows: Sequence[tuple[Context, str]]) -> list[float]:
        """`probe` of each (context, question), contexts of different streams, in one batched forward."""
        return batching.probe_rows(self, rows)

    # ---- internals --------------------------------------------------------------------------------------
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, past: Context | None,
                 cache: DynamicCache | None = None, use_cache: bool = True, spare: int | None = None,
                 mask: torch.Tensor | None = None, **vision) -> tuple[torch.Tensor, DynamicCache]:
        """Logits of the last position and the cache after `ids`. Without `cache`, one is made from `past`: its K/V
        copied once into buffers with room for `spare` more tokens (default: these ids), which this forward and
        later ones on the returned cache fill in place. `mask`: a 2-D attention mask over the cache and the ids (a
        batch with padding)."""
        if cache is None and use_cache:
            cache = buffered_cache(self.model.config, past, ids.shape[1] if spare is None else spare)
        if mask is not None:
            vision["attention_mask"] = mask.to(self.device)
        out = self.model(input_ids=ids.to(self.device), position_ids=positions.to(self.device), cache=cache,
                         use_cache=use_cache, logits_to_keep=1, **vision)
        return out.logits, cache

    def _tail(self, cache: DynamicCache, n: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        keys = tuple(layer.keys[:, :, -n:].clone() for layer in kv_of(cache))
        values = tuple(layer.values[:, :, -n:].clone() for layer in kv_of(cache))
        return keys, values

    @contextmanager
    def capture(self, which: str):
        """The index layer's key ("k") or query ("q") projections of the forwards run inside, as a list."""
        captured: list[torch.Tensor] = []
        proj = self._attn.k_proj if which == "k" else self._attn.q_proj
        handle = proj.register_forward_hook(lambda _m, _i, out: captured.append(out.detach()))
        try:
            yield captured
        finally:
            handle.remove()

    @contextmanager
    def decoder_inputs(self):
        """The input embeddings the decoder receives (vision tokens already in place), as a one-item list."""
        captured: list[torch.Tensor] = []

        def grab(_m, args, kwargs):
            x = kwargs.get("inputs_embeds")
            if x is not None:
                captured.append(x.detach())

        handle = self.language_model.register_forward_pre_hook(grab, with_kwargs=True)
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


def decoder_of(model):
    """The language model (decoder) of a transformers video-LLM: `model.model.language_model`, or
    `model.model.text_model` for the Idefics3 / SmolVLM family."""
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner.text_model


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
    proj = decoder_of(model).layers[layer].self_attn.q_proj
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
            q = captured[0][0].float().mean(0)  # (heads * head_dim,), or (heads * 2 * head_dim,): query, gate per head
            q = q.view(heads, -1)[:, :head_dim]  # (Qwen3.5's gated attention: the gate is not the query)
            out.append(q.reshape(kv, heads // kv, head_dim).mean(1).reshape(-1))
    finally:
        handle.remove()
    return torch.stack(out)
