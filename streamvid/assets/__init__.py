"""What ships inside the package, found in one place: the bundled model and the demo clips.

    from streamvid import assets
    assets.BUNDLED_MODEL              # the streamvid-tiny checkpoint folder
    assets.demo_clips()               # {"shapes_7": .../demo_videos/shapes_7/shapes_7.mp4, ...}
    assets.demo_clip("shapes_7")      # one clip's file; KeyError naming the clips there are

In the source tree they are the top-level `models/streamvid-tiny/` and `demo_videos/` folders, installed as the
packages `streamvid.assets.models` and `streamvid.assets.demo_videos` (pyproject.toml's `package-dir` and
`package-data`), so an editable install, `pip install .`, a wheel and `pip install git+...` find them the same way,
from any working directory. Each clip folder holds `NAME.mp4`, its ShapesWorld timeline and its question episodes
(`demo_videos/README.md`).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def _folder(package: str) -> Path:
    """The folder of a data package."""
    root = files(package)
    if not isinstance(root, Path):  # a zip import: checkpoints and videos need real files
        raise RuntimeError(f"streamvid's package data is not on the file system ({root}): install streamvid as files "
                           f"(pip install), not as a zip archive")
    return root


BUNDLED_MODEL = _folder("streamvid.assets.models") / "streamvid-tiny"
DEMO_VIDEOS = _folder("streamvid.assets.demo_videos")


def demo_clips(folder: Path = DEMO_VIDEOS) -> dict[str, Path]:
    """Bundled clips by name: each `NAME/NAME.mp4` under the demo_videos folder."""
    if not folder.is_dir():
        return {}
    return {d.name: d / f"{d.name}.mp4" for d in sorted(folder.iterdir()) if (d / f"{d.name}.mp4").is_file()}


def demo_clip(name: str) -> Path:
    clips = demo_clips()
    if name not in clips:
        raise KeyError(f"no demo clip named {name!r} (there are: {', '.join(clips) or 'none'})")
    return clips[name]
