"""Frames in the app: still frames sent to it (webcam, `/push_frame`) sized before they are decoded, made square and
small early; pushed into a session's stream; and the last one its stream read kept for the page's preview.

    cap_decoded_pixels(16_777_216)          # once per process: PIL refuses larger images when it reads the header
    image = load("frame.png", max_pixels=16_777_216, px=112)   # (112, 112, 3) uint8 RGB, or FrameRefused
    image = fit(array, px=112)              # centre-cropped square, resized; FrameRefused when not an RGB image
    image = prepare(array, max_pixels=16_777_216, px=112)     # an array pushed by a page: capped, then fitted
    tap = FrameTap(source)                  # the source an assistant reads; tap.last is the preview
    tap.push(image, t_s=3.5)                # into a push source; stream times only go forward

A frame larger than the cap is refused from its header alone (PIL reads the size without decoding); a JPEG is
decoded at a reduced scale when the model's frame is much smaller (PIL's draft mode).
"""

from __future__ import annotations

import threading

import numpy as np
from PIL import Image, UnidentifiedImageError

from streamvid.serve.images import fit as square
from streamvid.types import Frame
from streamvid_app import validation

DEFAULT_MAX_FRAME_PIXELS = 4096 * 4096


class FrameRefused(ValueError):
    """A frame that is not an image, or is larger than the pixel cap; the message says which."""


def cap_decoded_pixels(max_pixels: int) -> None:
    """Make PIL refuse (DecompressionBombError) any image above `max_pixels` as soon as its header is read,
    wherever it is opened in this process (the web framework decodes webcam frames itself)."""
    Image.MAX_IMAGE_PIXELS = max(1, max_pixels // 2)  # PIL errors above twice this value, warns above it


def check_size(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise FrameRefused(f"the frame is {width}x{height} = {width * height / 1e6:.1f} MP, above the "
                           f"{max_pixels / 1e6:.1f} MP cap (--max-frame-pixels)")


def load(path: str, max_pixels: int, px: int | None) -> np.ndarray:
    """The image file at `path` as (H, W, 3) uint8 RGB, square and `px` wide when `px` is set."""
    try:
        with Image.open(path) as im:
            check_size(*im.size, max_pixels)
            if px is not None:
                im.draft("RGB", (px, px))  # JPEG: decode at 1/2, 1/4 or 1/8 scale, still at least px wide
            rgb = im.convert("RGB")
    except FrameRefused:
        raise
    except Image.DecompressionBombError:
        raise FrameRefused(f"the frame is above the {max_pixels / 1e6:.1f} MP cap (--max-frame-pixels)") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise FrameRefused(f"not a readable image ({type(e).__name__})") from None
    return fit(np.asarray(rgb), px)


def fit(image, px: int | None) -> np.ndarray:
    """An (H, W, 3) uint8 RGB image, centre-cropped to a square and resized to `px` when set."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    if image.ndim != 3 or image.shape[2] not in (3, 4) or image.dtype != np.uint8:
        raise FrameRefused(f"expected an RGB image, got shape {image.shape} dtype {image.dtype}")
    return square(image[..., :3], px)


def prepare(image, max_pixels: int, px: int | None) -> np.ndarray:
    """An image pushed as an array (webcam, API): refused above `max_pixels`, then made RGB, square and `px` wide
    as `fit` does."""
    image = np.asarray(image)
    if image.ndim >= 2:
        check_size(image.shape[1], image.shape[0], max_pixels)
    return fit(image, px)


class FrameTap:
    """A FrameSource that forwards another and keeps the last frame the ingest thread read (the page's preview);
    frames go into a wrapped push source through `push`.

    Thread contract: `read` from the ingest thread only; `last` may be read from any thread (one reference
    assignment); `push` from any thread (the stream-time check is serialised); `close` and `dropped` as the
    wrapped source allows.
    """

    def __init__(self, inner):
        self.inner = inner
        self.live = inner.live
        self.last: Frame | None = None
        self.last_push_t_s: float | None = None  # stream time of the last frame pushed with an explicit t_s
        self._push_lock = threading.Lock()

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        frame = self.inner.read(timeout_s)
        if frame is not None:
            self.last = frame
        return frame

    def push(self, image: np.ndarray, t_s: float | None = None) -> None:
        """Offer `image` (as `prepare` returns it) to the wrapped push source at stream time `t_s` (None: the
        source's clock). An explicit `t_s` that is not a stream time, or is earlier than the last explicit one,
        raises validation.ArgumentError and pushes nothing."""
        with self._push_lock:
            t_s = validation.stream_time(t_s, after_s=self.last_push_t_s)
            if t_s is not None:
                self.last_push_t_s = t_s
        self.inner.push(image, t_s)

    @property
    def dropped(self) -> int:
        return self.inner.dropped

    def __getattr__(self, name: str):  # on_status, outages, lost_s of a camera/URL source
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value) -> None:
        if name == "on_status":
            setattr(self.inner, name, value)
        else:
            super().__setattr__(name, value)

    def close(self) -> None:
        self.inner.close()
