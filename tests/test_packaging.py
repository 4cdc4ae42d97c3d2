"""What a wheel carries: every package, the bundled model (models/) and demo clips (demo_videos/) as package data,
the web app as `streamvid_app` (no top-level `app`); and the library never imports the app. `.ci/run` also installs
the wheel into a fresh venv and runs `streamvid run` from `/`."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _package_folders() -> set[str]:
    """Import names of every folder holding Python modules: streamvid/... as is, app/ as streamvid_app."""
    names = set()
    for top, name in (("streamvid", "streamvid"), ("app", "streamvid_app"), ("models", "streamvid.assets.models"),
                      ("demo_videos", "streamvid.assets.demo_videos")):
        for f in (ROOT / top).rglob("*.py"):
            rel = f.parent.relative_to(ROOT / top)
            names.add(".".join((name, *rel.parts)))
    return names


def test_every_package_folder_is_listed_in_pyproject():
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == _package_folders()


def test_the_library_never_imports_the_app():
    for f in (ROOT / "streamvid").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("streamvid_app", "app") for n in names), f"{f} imports the app"


# what a working tree may hold beside the sources and must not ship: a checkpoint written under models/ (the docs'
# make-tiny and train-tiny examples write there) and the bytecode of demo_videos/__init__.py
NOT_SHIPPED = ("models/my-tiny/model.safetensors", "demo_videos/__pycache__/__init__.cpython-311.pyc")


def _copy_ignoring(folder: str, names: list[str]) -> set[str]:
    """What the wheel's source copy leaves out: build leftovers (an old build/lib would ship again), caches, and
    checkpoints under models/ other than the bundled one (a user's may be large)."""
    here = Path(folder)
    left_out = {n for n in names if n == "__pycache__"}
    if here == ROOT:
        left_out |= {n for n in names if n.startswith(".") or n in ("build", "dist", "runs") or n.endswith(".egg-info")}
    if here == ROOT / "models":
        left_out |= {n for n in names if (here / n).is_dir() and n != "streamvid-tiny"}
    return left_out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built from a copy of the source tree, with NOT_SHIPPED planted in it."""
    src, out = tmp_path_factory.mktemp("src") / "streamvid", tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, src, ignore=_copy_ignoring)
    for name in NOT_SHIPPED:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(b"not shipped")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(out), str(src)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    (built,) = out.glob("streamvid-*.whl")
    with zipfile.ZipFile(built) as z:
        yield z


def test_the_wheel_carries_the_bundled_model_and_the_demo_clips(wheel):
    """Every file of the top-level models/streamvid-tiny and demo_videos folders, under streamvid/assets/ in the
    wheel (the packages streamvid.assets.models and streamvid.assets.demo_videos)."""
    names = set(wheel.namelist())
    for top in ("models/streamvid-tiny", "demo_videos"):
        shipped = {"streamvid/assets/" + str(f.relative_to(ROOT)) for f in (ROOT / top).rglob("*")
                   if f.is_file() and "__pycache__" not in f.parts}
        assert shipped and shipped <= names, sorted(shipped - names)
    assert "streamvid/assets/models/streamvid-tiny/model.safetensors" in names
    clip = "streamvid/assets/demo_videos/shapes_7/"
    assert {clip + "shapes_7.mp4", clip + "episodes.jsonl"} <= names
    assert not any(n.startswith("streamvid/assets/models/my-tiny/") for n in names), "another checkpoint shipped"
    assert not any("__pycache__" in n for n in names), "bytecode shipped"


def test_the_wheel_installs_the_app_as_streamvid_app_and_registers_demo(wheel):
    names = set(wheel.namelist())
    assert {f"streamvid_app/{m}.py" for m in ("__init__", "ui", "cli", "app", "inputs", "sessions")} <= names
    assert not any(n.startswith(("app/", "models/", "demo_videos/", "tests/")) for n in names), "stray top-level"
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[streamvid.commands]" in text and "demo = streamvid_app.cli:register" in text
    assert "streamvid = streamvid.cli.main:main" in text


def test_the_readme_gives_a_cpu_only_install_of_the_pinned_torch():
    """The README's CPU-only install takes torch and torchvision from PyTorch's CPU wheel index at exactly the versions
    constraints.txt pins (its grep, run here, picks those two lines and nothing else), before the same install."""
    import re

    readme = (ROOT / "README.md").read_text()
    line = next(x for x in readme.splitlines() if "--index-url https://download.pytorch.org/whl/cpu" in x)
    pattern = re.search(r"grep -E '([^']+)' constraints.txt", line).group(1)
    picked = [x for x in (ROOT / "constraints.txt").read_text().splitlines() if re.search(pattern, x)]
    assert sorted(p.split("==")[0] for p in picked) == ["torch", "torchvision"], picked
    after = readme[readme.index(line):].splitlines()[1]
    assert after.startswith("pip install -e . -c constraints.txt"), after
