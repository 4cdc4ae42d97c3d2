"""Opening and decoding a video with PyAV for the frame sources: the sampling grid, the frame-size cap, RGB frames.

    container = open_container(url_or_path, "my clip", max_frame_pixels=4096 * 4096)   # ValueError / FrameTooLarge
    for frame in decode_frames(container, fps=2.0, size=112, name="my clip"):          # Frame, sampled and resized
        ...

Images are (H, W, 3) uint8 RGB, converted (and resized when `size` is given) by PyAV right after decoding, on the
decoding thread, in one swscale pass; frames the sampler skips are never converted. A `FullFrames` tap also hands each
sampled frame at the source's own size to a consumer, converted only while one is set (alert_media.py keeps them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

import av
import numpy as np

from streamvid.media.geometry import centre_square, scaled_size
from streamvid.types import Frame

GRID_EPS_S = 1e-6  # float slack when comparing a frame time with a grid point


class Sampler:
    """Keeps frames on the grid k/fps: accepts the first time at or past the next grid point. One thread."""

    def __init__(self, fps: float) -> None:
        self._period_s = 1.0 / fps
        self._k = 0  # index of the next grid point

    def take(self, t_s: float) -> bool:
        if t_s < self._k * self._period_s - GRID_EPS_S:
            return False
        # Past a gap in the stream, jump to the first grid point after t_s instead of catching up.
        self._k = max(self._k + 1, math.floor(t_s / self._period_s + GRID_EPS_S) + 1)
        return True


class FullFrames:
    """A tap for each sampled frame at its source's own size (the frames a stream sees may be resized).

    `to` (set from any thread; None: nobody) is the consumer. While it is set, `decode_frames` converts each sampled
    frame a second time, at full size, and `keep`s it; the source then `hand`s it over with the frame's final time
    and index, on the decoding thread. Frames the sampler skips are never converted; with `to` unset nothing more
    is done than reading one attribute per sampled frame. One decoding thread.
    """

    def __init__(self) -> None:
        self.to: Callable[[Frame], None] | None = None
        self._image: np.ndarray | None = None

    def keep(self, image: np.ndarray) -> None:
        self._image = image

    def hand(self, frame: Frame, image: np.ndarray | None = None) -> None:
        """`frame` at full size (`image`, or the one kept while decoding it) to the consumer, if one is set."""
        to, image, self._image = self.to, self._image if image is None else image, None
        if to is not None and image is not None:
            to(Frame(image=image, t_s=frame.t_s, index=frame.index))

    def through(self, frames: Iterator[Frame], same_size: bool = False) -> Iterator[Frame]:
        """`frames`, each handed over on the way (`same_size`: the frames are the source's own size already)."""
        for frame in frames:
            self.hand(frame, frame.image if same_size else None)
            yield frame


class FrameTooLarge(ValueError):
    """A video whose frames are larger than the pixel cap; the message gives both sizes."""


def check_frame_size(width: int, height: int, max_pixels: int | None) -> None:
    """FrameTooLarge when width x height is above `max_pixels` (None: no cap)."""
    if max_pixels is not None and width * height > max_pixels:
        size = f"{width * height / 1e6:.1f} MP" if width * height >= 100_000 else f"{width * height} pixels"
        cap = f"{max_pixels / 1e6:.1f} MP" if max_pixels >= 100_000 else f"{max_pixels}-pixel"
        raise FrameTooLarge(f"video frames are {width}x{height} = {size}, above the {cap} cap (--max-frame-pixels)")


def open_container(target: str, name: str, max_frame_pixels: int | None = None, **kwargs):
    """An open PyAV container that has a video stream, decoded with frame threads; ValueError otherwise.

    With `max_frame_pixels`, a stream that declares larger frames (codec width x height, known once the container
    is open) is refused with FrameTooLarge before a frame is decoded, and ffmpeg's `max_pixels` keeps the probing
    that opening does, and then the decoder, from allocating much larger frames, should the size change later
    (`decode_frames` refuses any frame above the cap).
    """
    if max_frame_pixels is not None:  # probing decodes no frame above twice the cap (room for alignment)
        kwargs["options"] = {**(kwargs.get("options") or {}), "max_pixels": str(2 * max_frame_pixels)}
    try:
        container = av.open(target, **kwargs)
    except (av.error.FFmpegError, OSError) as e:  # OSError: from a Python reader (see net_policy.HttpReader)
        raise ValueError(f"cannot open {name}: {e}") from e
    if not container.streams.video:
        container.close()
        raise ValueError(f"no video stream in {name}")
    stream = container.streams.video[0]
    if max_frame_pixels is not None:
        try:
            check_frame_size(stream.codec_context.width, stream.codec_context.height, max_frame_pixels)
        except FrameTooLarge:
            container.close()
            raise
        # the decoder checks its padded size (width rounded up to 64, ...): room for that, no more
        codec = stream.codec_context
        codec.options = {**codec.options, "max_pixels": str((codec.width + 64) * (codec.height + 64))}
    stream.thread_type = "AUTO"
    return container


def to_rgb(frame: av.VideoFrame, size: int | None) -> np.ndarray:
    """RGB at `size` x `size` (geometry.py: the shorter side scaled to `size` in one swscale pass from the decoded
    frame, no full-size RGB copy, then the centre square)."""
    if size is None:
        return frame.to_ndarray(format="rgb24")
    width, height = scaled_size(frame.width, frame.height, size)
    return np.ascontiguousarray(centre_square(frame.to_ndarray(format="rgb24", width=width, height=height)))


def decode_frames(container, fps: float, size: int | None, name: str, origin_s: float | None = None,
                  end_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                  max_frame_pixels: int | None = None,
                  on_audio: Callable[[float, av.AudioFrame], None] | None = None,
                  full: FullFrames | None = None) -> Iterator[Frame]:
    """Sampled RGB frames of the first video stream of an open container (which the caller closes).

    Stream time is the frame's pts in seconds minus `origin_s`, or minus the first frame's pts when
    `origin_s` is None (live). Frames before the origin are skipped, decoding stops at `end_s`. A frame
    without pts gets the previous time + 1/rate for a file, `clock()` since decoding started when live.
    A sampled frame is converted (and resized) on this thread right after it is decoded; the others never are.
    `on_audio(t_s, frame)`: the first audio stream is demuxed beside the video and each of its decoded frames
    handed over with its time on the same clock (from the origin on).
    `full`: while its consumer is set, each sampled frame is also converted at its own size and kept on it, for the
    source to hand over (FullFrames.hand) with the frame's final time; the yielded frame is that same array when
    `size` is None.
    """
    stream = container.streams.video[0]
    audio = container.streams.audio[0] if on_audio is not None and container.streams.audio else None
    frame_period_s = 1.0 / float(stream.average_rate) if stream.average_rate else 0.0
    sampler, index, t_s = Sampler(fps), 0, -frame_period_s
    live, started_s = origin_s is None, clock()
    decoded = container.decode(stream) if audio is None else _demuxed(container, stream, audio)
    try:
        for frame in decoded:
            if isinstance(frame, av.AudioFrame):
                if origin_s is not None and frame.time is not None and frame.time >= origin_s:
                    on_audio(frame.time - origin_s, frame)
                continue
            check_frame_size(frame.width, frame.height, max_frame_pixels)
            if frame.time is None:
                t_s = clock() - started_s if live else t_s + frame_period_s
            else:
                if origin_s is None:
                    origin_s = frame.time
                t_s = frame.time - origin_s
            if t_s < -GRID_EPS_S:  # decoded from the keyframe before the seek target
                continue
            if end_s is not None and t_s >= end_s - GRID_EPS_S:
                return
            if sampler.take(t_s):
                if full is not None and full.to is not None:
                    image = to_rgb(frame, None)
                    full.keep(image)
                    if size is not None:
                        image = to_rgb(frame, size)
                else:
                    image = to_rgb(frame, size)
                yield Frame(image=image, t_s=max(t_s, 0.0), index=index)
                index += 1
    except (av.error.FFmpegError, OSError) as e:  # (a frame above max_pixels fails in the decoder)
        raise ValueError(f"cannot decode {name}: {e}") from e


def _demuxed(container, video, audio) -> Iterator:
    """Decoded frames of both streams in the container's order; a broken audio packet is skipped (the video
    goes on without it)."""
    for packet in container.demux(video, audio):
        if packet.stream.index == audio.index:
            try:
                yield from packet.decode()
            except av.error.FFmpegError:
                continue
        else:
            yield from packet.decode()
