"""One frame geometry for every source (media/geometry.py): with a frame size set, a frame keeps its aspect ratio and
is scaled to about N x N pixels. The same 16:9 picture as a video file, a benchmark replay (PyAV and decord), a
pushed PNG and a webcam array reaches the model at one size, with its left and right edges still in view."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from streamvid.eval.replay import ClipSource
from streamvid.hub import images
from streamvid.media.clip_encoding import write_mp4
from streamvid.media.file_source import FileSource
from streamvid.media.geometry import fitted_size
from streamvid.types import Frame

PX = 56


@pytest.mark.parametrize("size, px, expected", [
    ((1280, 720, 112), 112, (149, 84)),  # 112 / 960 = 0.1167 of each side: 149.3 x 84
    ((640, 480, 56), 56, (65, 48)),  # 56 / 554.3: 64.7 x 48.5 (48.497)
    ((640, 640, 112), 112, (112, 112)),
    ((30, 40, 112), 112, (97, 129)),  # a small frame is scaled up to the budget
    ((4000, 100, 56), 56, (354, 28)),  # 354.2 x 8.9: the short side held at two merged patches
    ((4000, 100, 16), 16, (101, 16)),  # 101.2 x 2.5: at most px
])
def test_fitted_size_by_hand(size, px, expected):
    assert fitted_size(size[0], size[1], px) == expected


def picture() -> np.ndarray:
    """A 16:9 picture, 320 x 180: a red band down its left eighth, a blue one down its right eighth, grey between."""
    image = np.full((180, 320, 3), 128, np.uint8)
    image[:, :40] = (220, 30, 30)
    image[:, -40:] = (30, 30, 220)
    return image


def edges(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean colour of the outer sixteenth on the left and on the right."""
    w = image.shape[1] // 16
    return image[:, :w].reshape(-1, 3).mean(0), image[:, -w:].reshape(-1, 3).mean(0)


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("geometry") / "wide.mp4"
    write_mp4([Frame(picture(), i / 2, i) for i in range(4)], 2.0, path)
    return str(path)


def from_file(clip: str) -> np.ndarray:
    src = FileSource(clip, fps=2.0, size=PX)
    try:
        return src.read().image
    finally:
        src.close()


def from_replay(clip: str, backend: str) -> np.ndarray:
    src = ClipSource(clip, 0.0, 2.0, fps=2.0, size=PX, backend=backend)
    try:
        return src.read().image
    finally:
        src.close()


def test_every_source_gives_the_same_wide_frame_with_its_edges(clip):
    png = io.BytesIO()
    Image.fromarray(picture()).save(png, "PNG")
    frames = {"file": from_file(clip), "replay (pyav)": from_replay(clip, "pyav"),
              "pushed png": images.decode(png.getvalue(), "image/png", px=PX),
              "webcam array": images.prepare(picture(), px=PX)}
    try:
        import decord  # noqa: F401 - x86_64 wheels only
        frames["replay (decord)"] = from_replay(clip, "decord")
    except ImportError:
        pass
    # 56 / sqrt(320 * 180) = 0.2333 of each side: 74.7 x 42
    assert {name: f.shape for name, f in frames.items()} == {name: (42, 75, 3) for name in frames}
    for name, f in frames.items():
        left, right = edges(f)
        assert left[0] > 150 and left[2] < 90, (name, left)  # red: not cropped away, not grey
        assert right[2] > 150 and right[0] < 90, (name, right)  # blue
    reference = frames["webcam array"].astype(int)
    for name, f in frames.items():  # the same picture: video coding loss only
        assert np.abs(f.astype(int) - reference).mean() < 12, name
