"""One frame geometry for every source. With a frame size set (`--frame-px N`; by default the size a streamvid-trained
model such as the bundled one was trained at), a frame is scaled so that its shorter side is N pixels and its centre
N x N square is kept: a file, a URL, a camera, a benchmark replay and a pushed frame of the same 16:9 picture reach
the model alike. Without a frame size (real checkpoints, by default), frames keep the source's size and aspect ratio
and the model's own processor fits them within its pixel budget.

    scaled_size(1280, 720, 112)     # (199, 112): the shorter side at 112, then the centre 112 x 112 is kept
    centre_square(image)            # the centre square of an (H, W, 3) image (a view)

Why square: the bundled model was trained on square ShapesWorld frames only. Shown 16:9 frames with their aspect ratio
kept (about 112 x 112 pixels, 150 x 84), it answered 0.25 of 384 questions right where square frames gave 0.98; the
same frames squashed to a square gave 0.22 (benchmarks/frame_geometry.py, benchmarks/RESULTS.md). A centre crop shows
it the picture at the scale it knows, and loses the sides of a wide frame.
"""

from __future__ import annotations

import numpy as np


def scaled_size(width: int, height: int, px: int) -> tuple[int, int]:
    """(width, height) of a `width` x `height` frame scaled so that its shorter side is `px`, its aspect ratio kept."""
    if width <= height:
        return px, max(px, round(height * px / width))
    return max(px, round(width * px / height)), px


def centre_square(image: np.ndarray) -> np.ndarray:
    """The centre min(H, W) x min(H, W) square of an (H, W, ...) image, as a view."""
    h, w = image.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    return image[top:top + side, left:left + side]
