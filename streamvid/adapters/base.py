"""The adapter protocol: what the engine needs from a video-LLM, and the registry that loads one by name.

Of the engine, only `streamvid/adapters/` imports transformers (the checkpoint builders in streamvid/checkpoints/
and train-tiny do too). Tensors cross this boundary as plain torch tensors, in the value types of types.py
(`Encoded`, `Context`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from streamvid.adapters.refusals import check_layers
from streamvid.types import ChunkJob, Context, Encoded

if TYPE_CHECKING:
    from streamvid.adapters.batching import Decoding
    from streamvid.kv.budget import KVShape
    from streamvid.kv.positions import RopePositions


class VideoLLMAdapter(Protocol):
    """A video-LLM as the engine uses it. Every method may be called from any thread: implementations hold
    `lock` around each forward and keep no per-call state on the model between calls."""

    lock: threading.RLock
    positions: RopePositions  # how this model numbers positions and moves cached blocks (positions.py)
    rope_inv_freq: torch.Tensor  # (head_dim / 2,) float32: RoPE frequencies (= positions.inv_freq)
    index_dim: int
    frames_per_chunk_multiple: int  # chunks must hold a multiple of this many frames (the temporal patch)
    uses_stream_time: bool  # encode_chunk writes the chunk's stream time (t_start_s) into its tokens
    kv_shape: KVShape  # layers, KV heads, head dim and dtype bytes of the cache (budget.py)
    device: torch.device  # where inputs go (the input embeddings' device)
    sink_text: str  # the text every stream's context starts with (its attention sinks: system prompt, template)

    def tokens_per_chunk(self, height: int, width: int, frames: int) -> int: ...

    def encode_text(self, text: str, past: Context | None) -> Encoded: ...

    def encode_chunk(self, frames: Sequence[np.ndarray], past: Context, seconds_per_chunk: float,
                     t_start_s: float = 0.0) -> Encoded: ...

    def encode_chunks(self, jobs: Sequence[ChunkJob]) -> list[Encoded]:
        """`encode_chunk` of each job (one stream's chunk on its own context), batched into as few forwards as the
        family allows."""

    def question_vector(self, text: str) -> np.ndarray: ...

    def prompt(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str: ...

    def generate(self, context: Context, prompt: str, max_new_tokens: int,
                 stop: threading.Event | None = None) -> Iterator[str]: ...

    def probe(self, context: Context, question: str) -> float: ...

    def probe_many(self, context: Context, questions: Sequence[str]) -> list[float]: ...

    def probe_rows(self, rows: Sequence[tuple[Context, str]]) -> list[float]:
        """`probe` of each (context, question), contexts of different streams, in one batched forward."""

    def start_decoding(self, context: Context, prompt: str, max_new_tokens: int) -> Decoding:
        """A greedy answer to `prompt` on `context` (tokens, done, piece(), cancel()), advanced by `decode`."""

    def decode(self, decodings: Sequence[Decoding]) -> None:
        """One forward advances every unfinished decoding by one token (a first step prefills its prompt)."""


# model_type -> (architecture, module, adapter class); each family lives in its own module under adapters/
REGISTRY: dict[str, tuple[str, str, str]] = {
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", "streamvid.adapters.qwen2_5_vl", "QwenVLAdapter"),
    "qwen2_vl": ("Qwen2VLForConditionalGeneration", "streamvid.adapters.qwen2_5_vl", "QwenVLAdapter"),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", "streamvid.adapters.qwen3_vl", "Qwen3VLAdapter"),
    "qwen3_5": ("Qwen3_5ForConditionalGeneration", "streamvid.adapters.qwen3_5", "Qwen3_5Adapter"),
    "llava_onevision": ("LlavaOnevisionForConditionalGeneration", "streamvid.adapters.llava_onevision",
                        "LlavaOnevisionAdapter"),
    "llava_next_video": ("LlavaNextVideoForConditionalGeneration", "streamvid.adapters.llava_next_video",
                         "LlavaNextVideoAdapter"),
    "smolvlm": ("SmolVLMForConditionalGeneration", "streamvid.adapters.smolvlm", "SmolVLMAdapter"),
    "internvl": ("InternVLForConditionalGeneration", "streamvid.adapters.internvl", "InternVLAdapter"),
}


def supported() -> str:
    return ", ".join(f"{arch} ({model_type})" for model_type, (arch, _, _) in REGISTRY.items())


def adapter_class(config: dict) -> type:
    """The adapter class for a checkpoint's config.json: by `model_type`, else by `architectures`."""
    import importlib

    model_type = config.get("model_type")
    if model_type not in REGISTRY:
        by_arch = {arch: mt for mt, (arch, _, _) in REGISTRY.items()}
        model_type = next((by_arch[a] for a in config.get("architectures") or () if a in by_arch), None)
    if model_type is None:
        raise ValueError(f"unsupported model (model_type {config.get('model_type')!r}, architectures "
                         f"{config.get('architectures')}); supported: {supported()}")
    _, module, name = REGISTRY[model_type]
    return getattr(importlib.import_module(module), name)


def read_config(model: str) -> dict:
    """config.json of a checkpoint (local directory, or HF id from the hub cache / the hub)."""
    import json

    from transformers.utils import cached_file

    try:
        path = cached_file(model, "config.json")
    except OSError as e:
        kind = "directory" if Path(model).exists() else "model id (check the id, or the network / hub cache)"
        raise ValueError(f"cannot load model {model!r} as a {kind}: {str(e).splitlines()[0]}") from e
    return json.loads(Path(path).read_text())


def load_adapter(model: str, device: str = "cpu", dtype: str = "auto", index_layer: int | None = None,
                 **options) -> VideoLLMAdapter:
    """Load a checkpoint (HF id or local directory) behind the adapter that supports its architecture, chosen
    from its config.json (`REGISTRY`); an unsupported one is refused with the list of supported ones, and one whose
    layers the engine cannot hold with the reason (adapters/refusals.py), before any weights load.
    `options`: `device_map` ("auto": accelerate spreads a checkpoint that does not fit one device), `attn`
    ("auto", "sdpa", "flash_attention_2", "eager"). `index_layer` None: the default for the checkpoint
    (`retrieval.default_index_layer`)."""
    config = read_config(model)
    check_layers(config, model, list(REGISTRY))  # layers the engine cannot hold (sliding-window, shared K/V, ...): refused first
    cls = adapter_class(config)  # then an unsupported architecture
    if index_layer is None:
        from streamvid.adapters.retrieval import default_index_layer

        index_layer = default_index_layer(config, model)
    return cls(model, device=device, dtype=dtype, index_layer=index_layer, **options)


def adapter_for(config) -> VideoLLMAdapter:
    """The adapter an `EngineConfig` asks for (model, device, dtype, index layer, device map, attention)."""
    return load_adapter(config.model, config.device, config.dtype, config.memory.index_layer,
                        device_map=config.device_map, attn=config.attn)
