"""Retrieval embedders: where the vectors that long-term memory is searched by come from.

A block's vector and a question's vector must live in one space (FAISS inner product over unit vectors). By
default that space is the video-LLM's own (`ModelEmbedder`: the mean pre-RoPE key of a chunk's video tokens and the
mean pre-RoPE query of a question's tokens at the adapter's index layer, DESIGN.md §4), which needs no second
model. An image-text model trained for retrieval (CLIP, SigLIP: `adapters/clip_embedder.py`) can be plugged in
instead with `EngineConfig.embedder = "clip:<HF id or local dir>"`, at the cost of one more forward per chunk.

Thread contract: `chunk_vector` is called by the ingest thread and `question_vector` by the reasoning thread, so an
implementation must allow both at once (the adapter and ClipEmbedder each hold their own lock around a forward).
This module does not import transformers (only `streamvid/adapters/` does).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from streamvid.adapters.base import Encoded, VideoLLMAdapter

FORMS = "'model' or 'clip:<HF id or local dir>'"


class Embedder(Protocol):
    """Maps a chunk and a question to L2-normalised float32 vectors of length `dim` in one space. `name` says
    which space (sessions refuse to mix two: session_store.check_embedder)."""

    dim: int
    name: str

    def chunk_vector(self, frames: Sequence[np.ndarray], encoded: Encoded) -> np.ndarray:
        """(dim,) for a chunk: its frames as (H, W, 3) uint8 images and what the adapter encoded from them."""
        ...

    def question_vector(self, text: str) -> np.ndarray:
        """(dim,) for a question's text."""
        ...


class ModelEmbedder:
    """The video-LLM's own vectors (the default): `Encoded.vector` of the chunk and `adapter.question_vector`."""

    name = "model"

    def __init__(self, adapter: VideoLLMAdapter):
        self.adapter = adapter
        self.dim = adapter.index_dim

    def chunk_vector(self, frames: Sequence[np.ndarray], encoded: Encoded) -> np.ndarray:
        return encoded.vector

    def question_vector(self, text: str) -> np.ndarray:
        return self.adapter.question_vector(text)


def check_spec(spec: str) -> None:
    """ValueError (one line) unless `spec` is 'model' or 'clip:<something>'."""
    if not isinstance(spec, str) or not (spec == "model" or (spec.startswith("clip:") and spec[5:].strip())):
        raise ValueError(f"embedder must be {FORMS}, got {spec!r}")


def embedder_model(spec: str) -> str | None:
    """The checkpoint an embedder spec loads (None for 'model'): what follows 'clip:'."""
    check_spec(spec)
    return None if spec == "model" else spec[5:].strip()


def embedder_name(spec: str) -> str:
    """The name an embedder spec gives its vectors: 'model', or 'clip:' + the HF id or the local directory's
    absolute path (so a session resumed from another working directory names the same checkpoint)."""
    model = embedder_model(spec)
    if model is None:
        return "model"
    folder = Path(model).expanduser()
    return f"clip:{folder.resolve() if folder.is_dir() else model}"


def make_embedder(config, adapter: VideoLLMAdapter) -> Embedder:
    """The embedder `config.embedder` asks for; a CLIP/SigLIP model runs on the adapter's device."""
    name = embedder_name(config.embedder)
    if name == "model":
        return ModelEmbedder(adapter)
    return _clip(name.removeprefix("clip:"), str(getattr(adapter, "device", "cpu")))


@functools.lru_cache(maxsize=4)
def _clip(model: str, device: str) -> Embedder:
    """One loaded CLIP/SigLIP model per checkpoint and device in a process, shared by every assistant that asks
    for it (the demo's sessions and `score`'s episodes share one adapter the same way); it keeps no state."""
    from streamvid.adapters.clip_embedder import ClipEmbedder

    return ClipEmbedder(model, device)
