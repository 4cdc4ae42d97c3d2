"""Simulated cameras against `streamvid serve`: one process, and Ray Serve with 2 replicas, side by side in one run.

    python benchmarks/serve_load.py [--cameras 4] [--seconds 30] [--modes local,ray] [--replicas 2] [--model DIR]

Each mode starts its own `streamvid serve` on 127.0.0.1 (a free port; loopback only), waits for /v1/models, then
runs N cameras for the same stretch of time: each opens a push stream, pushes the frames of a bundled ShapesWorld
clip at 2 fps paced by the wall clock (PNG bodies, `t_s` = i / 2), and asks a question every 10 s of stream through
a streamed chat completion, from a thread of its own so frames keep coming meanwhile. After the last frame it waits
(bounded) until the engine has taken every frame, reads the stream's counts and deletes it. TTFT is measured by
the client: from sending the request to the first non-empty content delta. Prints one JSON summary: per mode the
streams served with 0 dropped frames, frames pushed / in / dropped, questions answered, TTFT and answer-time
p50 / p95, and the seconds the server took to start. Bounded: at most 64 cameras and 600 s per mode; every request
has a timeout; the servers are stopped at the end (SIGINT, then SIGKILL after 60 s).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx
from PIL import Image

from streamvid.assets import demo_clip, demo_clips
from streamvid.config import BUNDLED_MODEL
from streamvid.media.file_source import FileSource

MAX_CAMERAS, MAX_SECONDS = 64, 600.0
HOST = "127.0.0.1"  # loopback only
QUESTIONS = ("How many shapes are on screen?", "What shape is blue?", "The star is which colour?")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(q * (len(values) - 1))))], 1)


def clip_pngs(fps: float, seconds: float) -> list[list[bytes]]:
    """Each bundled clip's first `seconds` of frames as PNG bytes (cameras take them in turn, looping)."""
    out = []
    for name in demo_clips():
        frames = []
        for frame in iter(FileSource(demo_clip(name), fps=fps).read, None):
            if frame.t_s >= seconds:
                break
            buf = io.BytesIO()
            Image.fromarray(frame.image).save(buf, "PNG")
            frames.append(buf.getvalue())
        out.append(frames)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_server(args, ray: bool) -> tuple[subprocess.Popen, str, float, object]:
    port = free_port()
    cmd = [sys.executable, "-m", "streamvid.cli", "serve", "--host", HOST, "--port", str(port), "--model", args.model,
           "--frame-px", "112", "--max-streams", str(max(8, args.cameras)), "--device", "cpu"]
    if ray:
        cmd += ["--ray", "--replicas", str(args.replicas)]
    cmd += getattr(args, "extra_serve_args", [])
    log = tempfile.TemporaryFile(mode="w+")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"streamvid serve exited with {proc.returncode}: {log.read()[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                return proc, url, time.perf_counter() - t0, log
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError("streamvid serve did not answer /v1/models within 600 s")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


class Camera:
    def __init__(self, url: str, model: str, frames: list[bytes], args, index: int):
        self.url, self.model, self.frames, self.args, self.index = url, model, frames, args, index
        self.sid: str | None = None
        self.pushed = 0
        self.ttft_ms: list[float] = []
        self.answer_ms: list[float] = []
        self.errors: list[str] = []
        self.asked = 0
        self.answers: dict[int, str] = {}  # by the frame index the question was asked after
        self.final: dict = {}

    def run(self, start_at: float) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=60.0) as c:
                r = c.post("/v1/streams", json={"source": "push", "fps": self.args.fps})
                r.raise_for_status()
                self.sid = r.json()["id"]
                askers = []
                n = int(self.args.seconds * self.args.fps)
                every = int(self.args.question_every_s * self.args.fps)
                for i in range(n):
                    delay = start_at + i / self.args.fps - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    body = self.frames[i % len(self.frames)]
                    r = c.post(f"/v1/streams/{self.sid}/frames", params={"t_s": i / self.args.fps}, content=body,
                               headers={"Content-Type": "image/png"})
                    if r.status_code != 200:
                        self.errors.append(f"frame {i}: {r.status_code} {r.text[:200]}")
                        continue
                    self.pushed += 1
                    if i and i % every == 0:
                        question = QUESTIONS[(i // every + self.index) % len(QUESTIONS)]
                        t = threading.Thread(target=self.ask, args=(question, i), daemon=True)
                        t.start()
                        askers.append(t)
                for t in askers:
                    t.join(timeout=120)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:  # every frame taken (in or dropped), bounded
                    st = c.get(f"/v1/streams/{self.sid}").json()
                    if st["frames_in"] + st["frames_dropped"] >= self.pushed:
                        break
                    time.sleep(0.1)
                self.final = c.delete(f"/v1/streams/{self.sid}").json()
        except Exception as e:  # noqa: BLE001 - counted in the summary
            self.errors.append(f"{type(e).__name__}: {e}")

    def ask(self, question: str, at: int = 0) -> None:
        self.asked += 1
        text = []
        body = {"model": self.model, "stream_id": self.sid, "stream": True,
                "messages": [{"role": "user", "content": question}]}
        t0 = time.perf_counter()
        first = None
        try:
            with httpx.stream("POST", f"{self.url}/v1/chat/completions", json=body, timeout=120.0) as r:
                if r.status_code != 200:
                    self.errors.append(f"question: {r.status_code} {r.read()[:200]!r}")
                    return
                for line in r.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line.removeprefix("data: "))
                    if "error" in chunk:
                        self.errors.append(f"question: {chunk['error']['message']}")
                        return
                    content = chunk["choices"][0]["delta"].get("content") if chunk["choices"] else None
                    if content:
                        text.append(content)
                        if first is None:
                            first = time.perf_counter()
            done = time.perf_counter()
            self.answers[at] = "".join(text)
            self.ttft_ms.append(1000 * ((first or done) - t0))
            self.answer_ms.append(1000 * (done - t0))
        except httpx.HTTPError as e:
            self.errors.append(f"question: {type(e).__name__}: {e}")


def run_cameras(url: str, model: str, pngs: list[list[bytes]], args) -> list[Camera]:
    """`args.cameras` cameras, each on a thread, starting together in a second; returned when all are done."""
    cameras = [Camera(url, model, pngs[i % len(pngs)], args, i) for i in range(args.cameras)]
    start_at = time.monotonic() + 1.0
    threads = [threading.Thread(target=cam.run, args=(start_at,), daemon=True) for cam in cameras]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=args.seconds + 300)
    return cameras


def run_mode(args, ray: bool, pngs: list[list[bytes]]) -> dict:
    proc, url, startup_s, log = start_server(args, ray)
    try:
        model = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
        cameras = run_cameras(url, model, pngs, args)
    finally:
        stop_server(proc)
        log.close()
    ttft = [x for cam in cameras for x in cam.ttft_ms]
    answer = [x for cam in cameras for x in cam.answer_ms]
    finals = [cam.final for cam in cameras]
    errors = [e for cam in cameras for e in cam.errors]
    return {
        "server": f"streamvid serve --ray --replicas {args.replicas}" if ray else "streamvid serve",
        "startup_s": round(startup_s, 1),
        "streams": len(cameras),
        "streams_with_0_drops": sum(1 for f in finals if f.get("frames_dropped") == 0 and f.get("frames_in", 0) > 0),
        "frames_pushed": sum(cam.pushed for cam in cameras),
        "frames_in": sum(f.get("frames_in", 0) for f in finals),
        "frames_dropped": sum(f.get("frames_dropped", 0) for f in finals),
        "questions": sum(cam.asked for cam in cameras),
        "answered": len(answer),
        "ttft_ms_p50": pct(ttft, 0.5), "ttft_ms_p95": pct(ttft, 0.95),
        "answer_ms_p50": pct(answer, 0.5), "answer_ms_p95": pct(answer, 0.95),
        "errors": len(errors), "first_errors": errors[:3],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cameras", type=int, default=4)
    p.add_argument("--seconds", type=float, default=30.0, help="stream seconds per camera, per mode")
    p.add_argument("--fps", type=float, default=2.0)
    p.add_argument("--question-every-s", type=float, default=10.0)
    p.add_argument("--modes", default="local,ray", help="comma-separated: local, ray")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--model", default=str(BUNDLED_MODEL))
    args = p.parse_args()
    if not 1 <= args.cameras <= MAX_CAMERAS:
        p.error(f"--cameras must be in 1..{MAX_CAMERAS}")
    if not 0 < args.seconds <= MAX_SECONDS:
        p.error(f"--seconds must be in (0, {MAX_SECONDS:g}]")
    if not 0 < args.fps <= 30 or not args.question_every_s * args.fps >= 1:
        p.error("--fps must be in (0, 30] and --question-every-s at least one frame period")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - {"local", "ray"}:
        p.error("--modes takes local and/or ray")
    pngs = clip_pngs(args.fps, args.seconds)
    results = {}
    for mode in modes:
        print(f"serve_load: {mode} with {args.cameras} cameras for {args.seconds:g} s ...", file=sys.stderr, flush=True)
        results["local" if mode == "local" else f"ray_{args.replicas}_replicas"] = run_mode(args, mode == "ray", pngs)
    print(json.dumps({"cameras": args.cameras, "seconds": args.seconds, "fps": args.fps,
                      "question_every_s": args.question_every_s, "model": os.path.basename(args.model.rstrip("/")),
                      "cpus": os.cpu_count(), "modes": results}, indent=2))


if __name__ == "__main__":
    main()
