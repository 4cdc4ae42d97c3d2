"""One frame geometry for every source: with a frame size set (`--frame-px N`), a frame keeps its aspect ratio and is
scaled to about N x N pixels, as the HF processors treat an image within their pixel budget. A file, a URL, a camera,
a pushed frame and a benchmark replay of the same 16:9 picture reach the model alike, and nothing at a frame's edges
is cut off (a webcam's left and right thirds stay in view).

    fitted_size(1280, 720, 112)     # (149, 84): 12,516 pixels, about 112 x 112, still 16:9
    fitted_size(640, 640, 112)      # (112, 112)

The model's processor then rounds each side to its patch grid (a Qwen2-VL-style one: 140 x 84 above, 5 x 3 merged
patches, where a square frame has 4 x 4).
"""

from __future__ import annotations

import math

MIN_SIDE = 28  # no side below two merged 14-px patches (or `px`, when smaller), however long and thin the frame


def fitted_size(width: int, height: int, px: int) -> tuple[int, int]:
    """(width, height) of a `width` x `height` frame scaled to about `px` x `px` pixels, its aspect ratio kept."""
    scale, least = px / math.sqrt(width * height), min(MIN_SIDE, px)
    return max(least, round(width * scale)), max(least, round(height * scale))
