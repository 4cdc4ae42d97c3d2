"""Shared fixtures: a tiny random Qwen2.5-VL checkpoint built from a config (no download); the suite's hypothesis
profile; `wait_until`, the bounded condition wait that tests use instead of wall-clock thresholds."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import settings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# no per-example deadline in any property: a loaded CI machine must not turn a slow example (a file written, a
# session saved) into a failure; each property bounds its own max_examples
settings.register_profile("streamvid", deadline=None)
settings.load_profile("streamvid")


def wait_until(condition: Callable[[], object], timeout_s: float = 60.0, interval_s: float = 0.01) -> bool:
    """Poll `condition` until it is true or `timeout_s` has passed (generous: the bound only ends a test that would
    otherwise hang on a loaded machine); whether it became true."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return bool(condition())
        time.sleep(interval_s)
    return True


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from streamvid.checkpoints.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "qwen2_5_vl", seed=0, hidden=64, layers=2)


@pytest.fixture(scope="session")
def adapter(tiny_model_dir):
    from streamvid.adapters.qwen2_5_vl import QwenVLAdapter

    return QwenVLAdapter(str(tiny_model_dir))


@pytest.fixture(scope="module")
def engine(tiny_model_dir, adapter):
    """An engine on the tiny checkpoint answering in at most 4 tokens, one per test module (closed after it)."""
    from streamvid.config import EngineConfig
    from streamvid.engine.engine import Engine

    engine = Engine(EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=4), adapter)
    yield engine
    engine.close()


def random_frames(n: int, seed: int = 0, px: int = 56) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (px, px, 3), dtype=np.uint8) for _ in range(n)]


def hf_greedy_tokens(adapter, inputs: dict, max_new_tokens: int = 12) -> list[int]:
    """HF `generate`'s greedy tokens for `inputs` (the reference an engine's answer is held to), up to the first of
    the adapter's stop tokens; fails when there are fewer than 3 (a random model that stops at once says nothing)."""
    import torch

    with torch.inference_mode():
        out = adapter.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                     eos_token_id=sorted(adapter.stop_ids), pad_token_id=adapter.tokenizer.pad_token_id)
    ref = []
    for token in out[0, inputs["input_ids"].shape[1]:].tolist():
        if token in adapter.stop_ids:
            break
        ref.append(token)
    assert len(ref) >= 3, "the random model stops at once: the comparison would say nothing"
    return ref


def ctrl_c_as_at_a_terminal() -> None:
    """A child process's preexec_fn: SIGINT at its default, so that Python in it turns Ctrl-C into KeyboardInterrupt
    even when the tests run in a background job, whose children start with SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
