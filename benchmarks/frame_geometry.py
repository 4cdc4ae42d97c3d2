"""The bundled model on ShapesWorld episodes as they are (square) and pillarboxed to 16:9 (black bands left and
right, the picture unchanged in the middle), scored with `streamvid score` at the defaults: what the frame geometry
(media/geometry.py) does to the scores.

    python benchmarks/frame_geometry.py --seeds 9100-9107 --minutes 2 --out /tmp/geometry

Prints one JSON line per kind: overall accuracy, per-task accuracy, timeliness F1 (K=1).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np

from streamvid.media.clip_encoding import write_mp4
from streamvid.types import Frame


def pillarbox(src: Path, dst: Path) -> None:
    """The video at `src` widened to 16:9 with black bands, the same frames and times, written to `dst`."""
    frames = []
    with av.open(str(src)) as container:
        stream = container.streams.video[0]
        for i, decoded in enumerate(container.decode(stream)):
            image = decoded.to_ndarray(format="rgb24")
            h, w = image.shape[:2]
            wide = np.zeros((h, round(h * 16 / 9 / 2) * 2, 3), np.uint8)
            left = (wide.shape[1] - w) // 2
            wide[:, left:left + w] = image
            frames.append(Frame(wide, float(decoded.pts * stream.time_base), i))
        rate = float(stream.average_rate)
    write_mp4(frames, rate, dst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="9100-9107", help="FIRST-LAST")
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    first, last = map(int, args.seeds.split("-"))
    for seed in range(first, last + 1):
        square, wide = args.out / "square" / str(seed), args.out / "wide" / str(seed)
        subprocess.run(["streamvid", "synth", "--seed", str(seed), "--minutes", str(args.minutes), "--out",
                        str(square), "--speech", "off"], check=True, capture_output=True)
        wide.mkdir(parents=True, exist_ok=True)
        for f in square.iterdir():
            if f.suffix == ".mp4":
                pillarbox(f, wide / f.name)
            else:
                (wide / f.name).write_bytes(f.read_bytes())
    for kind in ("square", "wide"):
        episodes = sorted(str(p) for p in (args.out / kind).glob("*/episodes.jsonl"))
        run = subprocess.run(["streamvid", "score", *episodes, "--out", str(args.out / f"scores-{kind}"),
                              "--no-plots"], check=True, capture_output=True, text=True)
        report = json.loads(run.stdout.strip().splitlines()[-1])
        print(json.dumps({"kind": kind, "overall": report["overall"], "n": report["n"],
                          "tasks": {t: v["accuracy"] for t, v in report["tasks"].items()},
                          "timeliness_f1_k1": report["proactive"]["timeliness_f1_k1"]["f1"]}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
