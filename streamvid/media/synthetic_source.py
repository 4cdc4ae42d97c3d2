"""Synthetic frames drawn by a function, as a frame source: replayed frame by frame or paced live (tests,
benchmarks)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streamvid.media.decoding import FullFrames
from streamvid.media.frame_source import Pump, Replay, SourceBase, check_fps_size
from streamvid.types import Frame


class SyntheticSource(SourceBase):
    """`n_frames` frames from `make_frame(index, t_s)` at t_s = index / fps; for tests.

    Not live by default: every frame, in order, `read`/`close` from one consumer thread. `live=True` paces
    the frames to the wall clock on a reader thread, with the same contract as a realtime FileSource.
    """

    def __init__(self, make_frame: Callable[[int, float], np.ndarray], fps: float, n_frames: int,
                 live: bool = False) -> None:
        check_fps_size(fps, None)
        self.live = live
        self._full = FullFrames()
        frames = self._full.through((Frame(image=make_frame(i, i / fps), t_s=i / fps, index=i)
                                     for i in range(n_frames)), same_size=True)
        self._impl = Pump(frames, "synthetic source", pace=True) if live else Replay(frames)
