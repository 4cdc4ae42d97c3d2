"""Still frames sent to the hub (an HTTP body, a realtime message, a file the web page received, a webcam array):
refused above the pixel cap from their header before anything decodes them, then RGB and (with `px`) the centre
square at px x px, as every source's frames are (media/geometry.py).

    image = decode(png_bytes, "image/png", max_pixels=16_777_216, px=112)   # (112, 112, 3) uint8
    image = load("frame.png", max_pixels=16_777_216, px=112)                # a PNG, JPEG or WebP file
    image = prepare(array, max_pixels=16_777_216, px=112)                   # an array: capped, then fitted
    cap_decoded_pixels(16_777_216)   # once per process: PIL refuses larger images wherever it reads a header

PIL reads the size without decoding; a JPEG is decoded at a reduced scale when the model's frame is much smaller
(PIL's draft mode). Refusals are `Refused` (UnsupportedMedia for another type) with one line saying why.
"""

from __future__ import annotations

import io
import re
import warnings

import numpy as np
from PIL import Image, UnidentifiedImageError

from streamvid.errors import Refused, UnsupportedMedia
from streamvid.media.geometry import centre_square

IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/jpg": "JPEG"}
FILE_FORMATS = ("PNG", "JPEG", "WEBP")  # what a file the page received may be
DEFAULT_MAX_PIXELS = 4096 * 4096  # the default of every --max-frame-pixels


def media_type(content_type: str | None) -> str:
    """The image format a Content-Type names ("PNG" or "JPEG"); UnsupportedMedia for anything else."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind not in IMAGE_TYPES:
        raise UnsupportedMedia(f"expected Content-Type image/png or image/jpeg, got {kind or 'none'!r}")
    return IMAGE_TYPES[kind]


_process_cap = 0  # the largest cap any server of this process asked for (PIL's limit is one per process)


def cap_decoded_pixels(max_pixels: int) -> None:
    """Make PIL refuse (DecompressionBombError) any image above `max_pixels` as soon as its header is read,
    wherever it is opened in this process (the web framework decodes webcam frames itself). With several servers
    in one process the largest cap is PIL's, and each server's own check (`check_size`) refuses above its own."""
    global _process_cap
    _process_cap = max(_process_cap, max(1, max_pixels // 2))  # PIL errors above twice this value, warns above it
    Image.MAX_IMAGE_PIXELS = _process_cap


def decode(data: bytes, content_type: str | None, max_pixels: int = DEFAULT_MAX_PIXELS,
           px: int | None = None) -> np.ndarray:
    """(H, W, 3) uint8 RGB from PNG/JPEG bytes; square and `px` wide when `px` is set. Refused for an empty,
    unreadable or over-cap image, UnsupportedMedia for another type or bytes of another format."""
    fmt = media_type(content_type) if content_type is not None else None
    if not data:
        raise Refused("empty image: send the PNG or JPEG bytes as the request body")
    return _read(io.BytesIO(data), ("PNG", "JPEG"), fmt, max_pixels, px)


def load(path: str, max_pixels: int = DEFAULT_MAX_PIXELS, px: int | None = None) -> np.ndarray:
    """The PNG, JPEG or WebP file at `path` as (H, W, 3) uint8 RGB, square and `px` wide when `px` is set."""
    try:
        with open(path, "rb") as f:
            return _read(f, FILE_FORMATS, None, max_pixels, px)
    except OSError as e:
        raise Refused(f"cannot read the image ({type(e).__name__})") from None


def _read(fp, formats: tuple[str, ...], fmt: str | None, max_pixels: int, px: int | None) -> np.ndarray:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the cap below decides
            with Image.open(fp, formats=list(formats)) as im:
                if fmt is not None and im.format != fmt:
                    raise UnsupportedMedia(f"the body is {im.format or 'not an image'} but Content-Type says "
                                           f"{fmt.lower()}")
                check_size(*im.size, max_pixels)
                if px is not None and im.format == "JPEG":
                    im.draft("RGB", (px, px))  # decode at 1/2, 1/4 or 1/8 scale, still at least px wide
                rgb = np.asarray(im.convert("RGB"))
    except Refused:
        raise
    except Image.DecompressionBombError as e:  # PIL's process-wide cap (cap_decoded_pixels) saw it first
        said = re.search(r"\((\d+) pixels\)", str(e))
        size = f"{int(said.group(1)) / 1e6:.1f} MP, " if said else ""
        raise Refused(f"the image is {size}above the {_cap(max_pixels)} cap (--max-frame-pixels)") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise Refused(f"not a readable {' or '.join(formats)} image ({type(e).__name__})") from None
    return fit(rgb, px)


def check_size(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        size = f"{width * height / 1e6:.1f} MP" if max_pixels >= 100_000 else f"{width * height:,} pixels"
        raise Refused(f"the image is {width}x{height} = {size}, above the {_cap(max_pixels)} cap "
                      f"(--max-frame-pixels)")


def _cap(max_pixels: int) -> str:
    return f"{max_pixels / 1e6:.1f} MP" if max_pixels >= 100_000 else f"{max_pixels:,}-pixel"


def prepare(image, max_pixels: int = DEFAULT_MAX_PIXELS, px: int | None = None) -> np.ndarray:
    """An image pushed as an array (a webcam frame): refused above `max_pixels`, then made RGB (grey and RGBA
    accepted), square and `px` wide."""
    image = np.asarray(image)
    if image.ndim >= 2:
        check_size(image.shape[1], image.shape[0], max_pixels)
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    if image.ndim != 3 or image.shape[2] not in (3, 4) or image.dtype != np.uint8:
        raise Refused(f"expected an RGB image, got shape {image.shape} dtype {image.dtype}")
    return fit(image[..., :3], px)


def fit(image: np.ndarray, px: int | None) -> np.ndarray:
    """The centre square resized (bilinear) to `px` x `px` when `px` is set (media/geometry.py); as is otherwise."""
    if px is None or image.shape[:2] == (px, px):
        return np.ascontiguousarray(image)
    square = Image.fromarray(np.ascontiguousarray(centre_square(image)))
    return np.asarray(square.resize((px, px), Image.BILINEAR))
