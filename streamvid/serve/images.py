"""Still frames sent to the server (`POST /v1/streams/{id}/frames`, the realtime socket): PNG or JPEG bytes,
refused above a pixel cap from their header before anything decodes them, then RGB and (with `frame_px`) square.

    image = decode(png_bytes, "image/png", max_pixels=16_777_216, px=112)   # (112, 112, 3) uint8

The same rules as the web app's frames (PIL reads the size without decoding; a JPEG is decoded at a reduced scale
when the model's frame is much smaller), kept here because the library never imports the app.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, UnidentifiedImageError

from streamvid.serve.errors import BadRequest, UnsupportedMedia

IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/jpg": "JPEG"}
DEFAULT_MAX_PIXELS = 4096 * 4096


def media_type(content_type: str | None) -> str:
    """The image format a Content-Type names ("PNG" or "JPEG"); UnsupportedMedia (415) for anything else."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind not in IMAGE_TYPES:
        raise UnsupportedMedia(f"expected Content-Type image/png or image/jpeg, got {kind or 'none'!r}")
    return IMAGE_TYPES[kind]


def decode(data: bytes, content_type: str | None, max_pixels: int = DEFAULT_MAX_PIXELS,
           px: int | None = None) -> np.ndarray:
    """(H, W, 3) uint8 RGB from PNG/JPEG bytes; square and `px` wide when `px` is set. BadRequest (400) for an
    empty, unreadable or over-cap image, UnsupportedMedia (415) for another type or bytes of another format."""
    fmt = media_type(content_type) if content_type is not None else None
    if not data:
        raise BadRequest("empty image: send the PNG or JPEG bytes as the request body")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=["PNG", "JPEG"]) as im:
                if fmt is not None and im.format != fmt:
                    raise UnsupportedMedia(f"the body is {im.format or 'not an image'} but Content-Type says "
                                           f"{fmt.lower()}")
                width, height = im.size
                if width * height > max_pixels:
                    raise BadRequest(f"the image is {width}x{height} = {width * height / 1e6:.1f} MP, above the "
                                     f"{max_pixels / 1e6:.1f} MP cap (--max-frame-pixels)")
                if px is not None and im.format == "JPEG":
                    im.draft("RGB", (px, px))  # decode at 1/2, 1/4 or 1/8 scale, still at least px wide
                rgb = np.asarray(im.convert("RGB"))
    except (BadRequest, UnsupportedMedia):
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise BadRequest(f"the image is above the {max_pixels / 1e6:.1f} MP cap (--max-frame-pixels)") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise BadRequest(f"not a readable PNG or JPEG image ({type(e).__name__})") from None
    return fit(rgb, px)


def fit(image: np.ndarray, px: int | None) -> np.ndarray:
    """Centre-cropped to a square and resized to `px` (bilinear) when `px` is set; the image as is otherwise."""
    if px is None or image.shape[:2] == (px, px):
        return np.ascontiguousarray(image)
    h, w = image.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    square = Image.fromarray(np.ascontiguousarray(image[top:top + side, left:left + side]))
    return np.asarray(square.resize((px, px), Image.BILINEAR))
