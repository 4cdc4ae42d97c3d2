"""Shared fixtures: a tiny random Qwen2.5-VL checkpoint built from a config (no download)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from streamvid.checkpoints.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "qwen2_5_vl", seed=0, hidden=64, layers=2)


@pytest.fixture(scope="session")
def adapter(tiny_model_dir):
    from streamvid.adapters.qwen2_5_vl import QwenVLAdapter

    return QwenVLAdapter(str(tiny_model_dir))


def random_frames(n: int, seed: int = 0, px: int = 56) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (px, px, 3), dtype=np.uint8) for _ in range(n)]
