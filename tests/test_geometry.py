"""One frame geometry for every source (media/geometry.py): with a frame size set, a frame's shorter side is scaled
to N and its centre N x N square kept. The same 16:9 picture as a video file, a benchmark replay (PyAV and decord), a
pushed PNG and a webcam array reaches the model as the same square."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from streamvid.eval.replay import ClipSource
from streamvid.hub import images
from streamvid.media.clip_encoding import write_mp4
from streamvid.media.file_source import FileSource
from streamvid.media.geometry import centre_square, scaled_size
from streamvid.types import Frame

PX = 56


@pytest.mark.parametrize("size, px, expected", [
    ((1280, 720, 112), 112, (199, 112)),  # 1280 * 112 / 720 = 199.1
    ((720, 1280, 112), 112, (112, 199)),
    ((640, 480, 56), 56, (75, 56)),  # 74.7
    ((640, 640, 112), 112, (112, 112)),
    ((30, 40, 112), 112, (112, 149)),  # a small frame is scaled up: 40 * 112 / 30 = 149.3
])
def test_scaled_size_by_hand(size, px, expected):
    assert scaled_size(size[0], size[1], px) == expected


def test_centre_square_by_hand():
    image = np.arange(2 * 5).reshape(2, 5)
    assert centre_square(image).tolist() == [[1, 2], [6, 7]]
    assert centre_square(image.T).tolist() == [[1, 6], [2, 7]]


def picture() -> np.ndarray:
    """A 16:9 picture, 320 x 180: a red band down its left eighth, a blue one down its right eighth, grey between
    with a green square in the middle (its centre 180 x 180 square holds the green and some grey, no band)."""
    image = np.full((180, 320, 3), 128, np.uint8)
    image[:, :40] = (220, 30, 30)
    image[:, -40:] = (30, 30, 220)
    image[60:120, 130:190] = (30, 200, 30)
    return image


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


def test_every_source_gives_the_same_centre_square(clip):
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
    assert {name: f.shape for name, f in frames.items()} == {name: (PX, PX, 3) for name in frames}
    # the centre 180 x 180 of the picture at 56 px: grey at its edges (the bands are outside it), the green square
    # (60 px of 180) in its middle third
    for name, f in frames.items():
        edge = np.concatenate([f[:, :4], f[:, -4:]]).reshape(-1, 3).mean(0)
        assert np.abs(edge - 128).max() < 12, (name, edge)
        middle = f[22:34, 22:34].reshape(-1, 3).mean(0)
        assert middle[1] > 170 and middle[0] < 70, (name, middle)
    reference = frames["webcam array"].astype(int)
    for name, f in frames.items():  # the same picture: video coding and resampling only
        assert np.abs(f.astype(int) - reference).mean() < 12, name
