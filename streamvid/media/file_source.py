"""Video files as frame sources: decoded with PyAV and replayed frame by frame, or played live on the wall clock
(`--realtime`), with the file's own sound on the frames' clock (frame_source.py has the two semantics)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from streamvid.audio.pcm import AudioChunk, file_audio
from streamvid.media.decoding import FullFrames, decode_frames, open_container
from streamvid.media.frame_source import Pump, Replay, SourceBase, check_fps_size


class FileSource(SourceBase):
    """A video file decoded with PyAV, resampled to `fps`, between `t_start_s` and `t_end_s` (exclusive).

    Frame.t_s = the frame's own pts time minus the stream start and `t_start_s` (so the first frame is at
    ~0.0), not the grid time. Replay (`realtime=False`): every sampled frame in order, `live=False`;
    `read`/`close` from one consumer thread. `realtime=True`: a reader thread paces frames to the wall clock
    and the source is live (latest frame wins, `dropped` counts); `read` from one consumer thread, `close`
    from any thread. A missing, unreadable or undecodable file raises ValueError; one whose frames are larger
    than `max_frame_pixels` (None: no cap) raises FrameTooLarge before a frame is decoded.
    """

    def __init__(self, path: str | Path, fps: float, realtime: bool = False, t_start_s: float = 0.0,
                 t_end_s: float | None = None, size: int | None = None, max_frame_pixels: int | None = None) -> None:
        check_fps_size(fps, size)
        if t_start_s < 0 or (t_end_s is not None and t_end_s <= t_start_s):
            raise ValueError(f"expected 0 <= t_start_s < t_end_s, got t_start_s={t_start_s}, t_end_s={t_end_s}")
        if not Path(path).is_file():
            raise ValueError(f"video file not found: {path}")
        self.path, self.live = str(path), realtime
        container = open_container(self.path, f"video file {path}", max_frame_pixels)
        stream = container.streams.video[0]
        stream_start_s = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
        origin_s = stream_start_s + t_start_s
        if t_start_s > 0:
            container.seek(int(origin_s / stream.time_base), stream=stream)  # lands on a keyframe at or before
        end_s = None if t_end_s is None else t_end_s - t_start_s
        self._sound = (origin_s, end_s) if container.streams.audio else None
        self._full = FullFrames()
        frames = self._full.through(decode_frames(container, fps, size, self.path, origin_s, end_s,
                                                  max_frame_pixels=max_frame_pixels, full=self._full))
        if realtime:  # the reader thread closes the container when it ends
            self._impl = Pump(frames, self.path, pace=True, on_exit=container.close)
        else:
            self._impl = Replay(frames, on_close=container.close)

    @property
    def clock_origin_s(self) -> float | None:
        """Paced (`realtime`): the monotonic time at which stream time 0 is played, once the first frame is out;
        what the file's sound is paced by too (hearing.py). None for a replay."""
        return getattr(self._impl, "clock_origin_s", None)

    def sound(self) -> Iterator[AudioChunk] | None:
        """The file's sound on the frames' clock (audio/pcm.file_audio, decoded on its own), or None when it has no
        audio track."""
        if self._sound is None:
            return None
        return file_audio(self.path, origin_s=self._sound[0], end_s=self._sound[1])
