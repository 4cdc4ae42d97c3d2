"""Retrieval embedders: where the vectors that long-term memory is searched by come from.

A block's vectors and a question's vector must live in one space (FAISS inner product). By default that space is
the video-LLM's own (`ModelEmbedder`: pre-RoPE keys of a chunk's video tokens and the mean pre-RoPE query of a
question's tokens at the adapter's index layer, docs/architecture.md), which needs no second model. A block may have
several vectors (rows); it scores by its best row (memory.py).

The model's block rows are (mean key + 2 x region key) / 3, one per region of the frame (adapters/hf.py
`region_keys`: at most 4 x 4), so a block scores (q·mean + 2 max over regions q·region) / 3: how well the whole
chunk matches, and more, how well its best-matching region does. The mean alone blurs a small object into the rest
of the frame ("what shape was purple?" finds blocks of blue things); the best region alone ignores the rest.
Measured with the bundled model on ShapesWorld memory questions (one of the top 4 blocks shows what the question
names), on six dev streams (2001-2006, 360 questions) and twenty held-out streams (1001-1020, 1,200 questions);
weights from 1.5 to 2 tie on dev:

    block score                    dev    held-out
    mean key                       0.57   0.68
    best region                    0.70   0.77
    (mean + best region) / 2       0.65   0.82
    (mean + 2 best region) / 3     0.69   0.84
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from streamvid.once import once

if TYPE_CHECKING:
    from streamvid.adapters.base import VideoLLMAdapter
    from streamvid.types import Encoded

REGION_WEIGHT = 2.0  # a block row: (mean key + REGION_WEIGHT x region key) / (1 + REGION_WEIGHT)
SAME_REGION = 0.99  # a region whose key has at least this cosine to one kept already adds no row
FORMS = "'model' or 'clip:<HF id or local dir>'"


class Embedder(Protocol):
    """Maps a chunk and a question to L2-normalised float32 vectors of length `dim` in one space. `name` says
    which space (sessions refuse to mix two: session_store.check_embedder)."""

    dim: int
    name: str

    def chunk_vector(self, frames: Sequence[np.ndarray], encoded: Encoded) -> np.ndarray:
        """(dim,) or (rows, dim) for a chunk (rows of norm at most 1; the block scores by its best row): its frames
        as (H, W, 3) uint8 images and what the adapter encoded from them."""
        ...

    def question_vector(self, text: str) -> np.ndarray:
        """(dim,) for a question's text."""
        ...


class ModelEmbedder:
    """The video-LLM's own vectors (the default): a chunk's rows (`Encoded.vector` + 2 x each of `Encoded.regions`) / 3,
    or `Encoded.vector` alone for an adapter without regions, and `adapter.question_vector`."""

    name = "model"

    def __init__(self, adapter: VideoLLMAdapter):
        self.adapter = adapter
        self.dim = adapter.index_dim

    def chunk_vector(self, frames: Sequence[np.ndarray], encoded: Encoded) -> np.ndarray:
        if encoded.regions is None:
            return encoded.vector
        regions = distinct_rows(encoded.regions)
        return ((encoded.vector[None] + REGION_WEIGHT * regions) / (1 + REGION_WEIGHT)).astype(np.float32)

    def question_vector(self, text: str) -> np.ndarray:
        return self.adapter.question_vector(text)


def distinct_rows(units: np.ndarray, same: float = SAME_REGION) -> np.ndarray:
    """The rows of `units` (unit vectors) in order, without those whose cosine to a row kept before is >= `same`.
    A dropped row scores within sqrt(2 - 2 x same) (0.14) of a kept one for any unit query, so a block's best
    row barely moves, while the index shrinks where a frame is mostly alike (a wall, the sky, an empty
    ShapesWorld grid: 16 regions become 3.8 rows a block on average, with the same retrieval on the dev streams).
    FAISS scans every row of every block for a question, so rows are what search time grows with."""
    kept: list[int] = []
    for i, row in enumerate(units):
        if not kept or float((units[kept] @ row).max()) < same:
            kept.append(i)
    return units[kept]


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
    """The embedder `config.memory.embedder` asks for; a CLIP/SigLIP model runs on the adapter's device."""
    name = embedder_name(config.memory.embedder)
    if name == "model":
        return ModelEmbedder(adapter)
    return _clip(name.removeprefix("clip:"), str(getattr(adapter, "device", "cpu")))


@once(maxsize=4)
def _clip(model: str, device: str) -> Embedder:
    """One loaded CLIP/SigLIP model per checkpoint and device in a process, shared by every assistant that asks
    for it (the demo's sessions and `score`'s episodes share one adapter the same way); it keeps no state."""
    from streamvid.adapters.clip_embedder import ClipEmbedder

    return ClipEmbedder(model, device)
