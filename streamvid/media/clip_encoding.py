"""JPEG stills (PIL) and H.264 clips in MP4 (PyAV) of RGB frames: what alert_media.py keeps of an alert.

    data = jpeg(frame.image)                          # bytes of a JPEG at the frame's size
    thumb = jpeg(frame.image, max_px=160)             # at most 160 px on its longer side
    write_mp4(frames, fps=2.0, path="clip.mp4")       # H.264 (yuv420p, moov first: plays in browsers as it loads)
    data = mp4_bytes(frames, fps=2.0)                 # the same, as bytes (through a temporary file)

A clip's frames sit at their own stream times (the first at 0), each shown until the next; the last for one frame
period. Frames of another size than the first (a camera that changed resolution) are scaled to it; odd sizes are
scaled to the even size below (H.264 in 4:2:0 needs even sizes).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np

from streamvid.types import Frame


def h264_encoder() -> str:
    """The first H.264 encoder this PyAV build has ("libx264" here); "mpeg4" (MPEG-4 part 2) when none is."""
    import av

    for name in ("libx264", "h264", "libopenh264"):
        try:
            av.codec.Codec(name, "w")
            return name
        except ValueError:  # av.codec.codec.UnknownCodecError
            continue
    return "mpeg4"


JPEG_QUALITY = 90
CLIP_CRF = 23  # x264's quality (lower: better and larger); 23 is its default
CLIP_PRESET = "veryfast"
TIME_BASE = Fraction(1, 1000)  # frame times in the clip, in milliseconds


def jpeg(image: np.ndarray, quality: int = JPEG_QUALITY, max_px: int | None = None) -> bytes:
    """A JPEG of an (H, W, 3) uint8 RGB image; with `max_px`, scaled down to fit max_px on its longer side."""
    from PIL import Image

    picture = Image.fromarray(image, "RGB")
    if max_px is not None and max(picture.size) > max_px:
        picture.thumbnail((max_px, max_px), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    picture.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def smaller_jpeg(data: bytes, max_px: int, quality: int = JPEG_QUALITY) -> bytes:
    """A JPEG scaled down to fit `max_px` on its longer side (the same bytes when it already fits)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as picture:
        if max(picture.size) <= max_px:
            return data
        return jpeg(np.asarray(picture.convert("RGB")), quality, max_px)


def write_mp4(frames: Sequence[Frame], fps: float, path: str | Path) -> None:
    """Encode `frames` (oldest first, at least one) into an MP4 file at `path`; OSError or ValueError when it
    cannot be written."""
    import av


    if not frames:
        raise ValueError("a clip needs at least one frame")
    height, width = frames[0].image.shape[:2]
    width, height = max(2, width - width % 2), max(2, height - height % 2)
    codec = h264_encoder()
    try:
        with av.open(str(path), "w", format="mp4", options={"movflags": "+faststart"}) as out:
            stream = out.add_stream(codec, rate=Fraction(fps).limit_denominator(1000))
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.codec_context.time_base = TIME_BASE
            if codec == "mpeg4":
                stream.bit_rate = 2_000_000
            else:
                stream.options = {"crf": str(CLIP_CRF), "preset": CLIP_PRESET}
            t0, last_pts = frames[0].t_s, -1
            for frame in frames:
                picture = av.VideoFrame.from_ndarray(frame.image, format="rgb24")
                if (picture.width, picture.height) != (width, height):
                    picture = picture.reformat(width=width, height=height)
                last_pts = max(last_pts + 1, round((frame.t_s - t0) / TIME_BASE))
                picture.pts, picture.time_base = last_pts, TIME_BASE
                out.mux(stream.encode(picture))
            out.mux(stream.encode(None))
    except av.error.FFmpegError as e:
        if isinstance(e, OSError):
            raise
        raise ValueError(f"cannot encode the clip: {e}") from e


def mp4_bytes(frames: Sequence[Frame], fps: float) -> bytes:
    """`write_mp4` into a temporary file, returned as bytes (the file is removed)."""
    handle, name = tempfile.mkstemp(suffix=".mp4", prefix="streamvid-clip-")
    os.close(handle)
    try:
        write_mp4(frames, fps, name)
        return Path(name).read_bytes()
    finally:
        Path(name).unlink(missing_ok=True)
