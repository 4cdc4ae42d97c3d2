"""Admission: whether an engine takes one more stream, by its caps on streams, window KV and long-term memory RAM.

    admission = Admission(adapter, engine_config, max_streams)
    admission.check([s.config for s in open_streams], config)    # EngineFull past a cap
    admission.window_mb(config)                                  # a stream's window KV when full, in MB

A stream counts at its full budgets, not at what it holds now: the window at `frame_px` (448 px when frames keep
their size), the long-term memory at its `memory_ram_mb` when it keeps one. A refused stream is never opened, so the
streams already open go on as they were.
"""

from __future__ import annotations

from streamvid.adapters.base import VideoLLMAdapter
from streamvid.config import EngineConfig
from streamvid.errors import Busy
from streamvid.kv.budget import budgets


class EngineFull(Busy, RuntimeError):
    """The engine holds as many streams as its caps allow."""


class Admission:
    def __init__(self, adapter: VideoLLMAdapter, config: EngineConfig, max_streams: int):
        self.adapter = adapter
        self.config = config  # the engine's: its caps
        self.max_streams = max_streams
        self._window_mb: dict[tuple, float] = {}

    def check(self, open_configs: list[EngineConfig], config: EngineConfig) -> None:
        """EngineFull when one more stream with `config`, beside open streams with `open_configs`, would pass the
        engine's stream, KV or host-memory cap."""
        if len(open_configs) >= self.max_streams:
            raise EngineFull(f"this engine serves {self.max_streams} streams at most (--max-streams); close one first")
        if (cap := self.config.scheduler.kv_mb) is not None:
            kv = sum(self.window_mb(c) for c in (*open_configs, config))
            if kv > cap + 1e-9:
                raise EngineFull(f"one more stream would hold {kv:,.1f} MB of window KV on this engine, over its "
                                 f"--engine-kv-mb {cap:g}; close a stream or give streams a smaller window")
        if (cap := self.config.scheduler.memory_mb) is not None:
            ram = sum(c.memory.ram_mb for c in (*open_configs, config) if c.memory.top_k > 0)
            if ram > cap + 1e-9:
                raise EngineFull(f"one more stream would let long-term memories hold {ram:,.0f} MB of RAM on this "
                                 f"engine, over its --engine-memory-mb {cap:g}; close a stream or lower "
                                 f"--memory-ram-mb")

    def window_mb(self, config: EngineConfig) -> float:
        """The KV window a stream with `config` holds when full: at frame_px (448 px frames when frames keep
        their size), in MB."""
        px = config.frame_px or 448
        key = (px, config.frames_per_chunk, config.fps, config.window.seconds, config.window.tokens, config.window.mb)
        if key not in self._window_mb:
            tokens = self.adapter.tokens_per_chunk(px, px, config.frames_per_chunk)
            held = budgets(self.adapter.kv_shape, tokens, config).window_tokens_held
            self._window_mb[key] = held * self.adapter.kv_shape.bytes_per_token / 2**20
        return self._window_mb[key]
