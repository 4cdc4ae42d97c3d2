"""Normal cameras against `streamvid serve`, without and then with an adversary, side by side in one run.

    python benchmarks/adversarial_load.py [--cameras 8] [--seconds 30] [--model DIR]

One `streamvid serve` on 127.0.0.1 (a free port; loopback only; `--allow-private-urls`, so that its sources may
point at this machine's black-hole server) serves two phases of the same length:
- without: N cameras (serve_load.Camera: a bundled ShapesWorld clip pushed at 2 fps, a question every 5 s through a
  streamed chat completion);
- with: the same N cameras on new streams, plus one adversary that, as fast as it is answered, asks questions as long
  as the token cap allows, with a dialogue as long as its cap allows, on a stream of its own that pushes frames and
  holds `--max-watches` watches each as long as the condition cap allows; and 8 streams opened on a URL of a local
  server that accepts connections and never answers.
The lengths at the caps are found by asking the server (its one-line 400 names the tokens and the cap). Reported
per phase: the normal streams' TTFT p50 / p95, frames pushed and dropped, questions answered, the answers that
equal the same question's answer in the other phase (same clip, stream time and question), the adversary's
requests and their outcomes, the URL opens' outcomes, and the server's RSS before and after. Bounded: 64 cameras,
600 s per phase, every request with a timeout, the server stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time

import httpx

from serve_load import (HOST, MAX_CAMERAS, MAX_SECONDS, Camera, clip_pngs, pct, run_cameras, start_server,
                        stop_server)

from streamvid.config import BUNDLED_MODEL

EMOJI = "\U0001F600"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return round(kb / 1024, 1)


class BlackHole:
    """A TCP server on 127.0.0.1 that accepts connections and never answers; closed at the end."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.5)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
            except OSError:
                continue

    def close(self) -> None:
        self.stop.set()
        for c in self.conns:
            c.close()
        self.sock.close()


def longest(accepts, lo: int = 1, hi: int = 4000) -> int:
    """The largest n in [lo, hi] that `accepts(n)` (monotone: True up to some n); lo if none."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if accepts(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


class Adversary:
    def __init__(self, url: str, model: str, frames: list[bytes], args):
        self.url, self.model, self.frames, self.args = url, model, frames, args
        self.outcomes: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.stop = threading.Event()

    def count(self, what: str) -> None:
        self.outcomes[what] = self.outcomes.get(what, 0) + 1

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=120.0) as c:
            sid = c.post("/v1/streams", json={"source": "push", "fps": self.args.fps}).json()["id"]

            def asks(n: int) -> bool:  # a question of n emoji is taken (the stream's queue may be busy: 429)
                r = c.post(f"/v1/streams/{sid}/watches", json={"condition": "a red circle " + EMOJI * n})
                if r.status_code == 200:
                    c.delete(f"/v1/streams/{sid}/watches/{r.json()['id']}")
                return r.status_code == 200

            cond = longest(asks, 1, 1000)
            self.sizes["condition_emoji"] = cond
            watches = 0
            while c.post(f"/v1/streams/{sid}/watches",
                         json={"condition": f"a red circle {watches} " + EMOJI * (cond - 1)}).status_code == 200:
                watches += 1
                if watches > 1000:
                    break
            self.sizes["watches"] = watches
            pusher = threading.Thread(target=self.push, args=(sid,), daemon=True)
            pusher.start()
            question = None
            while not self.stop.is_set():
                if question is None:
                    def fits(n: int) -> bool:
                        r = self.chat(c, sid, EMOJI * n, [])
                        return r != 400
                    q = longest(fits, 1, 1000)
                    self.sizes["question_emoji"] = q
                    question = EMOJI * q
                    turn = EMOJI * (q - 4)
                    dialogue = [{"role": "user", "content": turn}, {"role": "assistant", "content": turn}] * 2
                self.count(f"question {self.chat(c, sid, question, dialogue)}")
            pusher.join(timeout=30)

    def chat(self, c: httpx.Client, sid: str, question: str, dialogue: list[dict]) -> int:
        body = {"model": self.model, "stream_id": sid,
                "messages": [*dialogue, {"role": "user", "content": question}]}
        try:
            return c.post("/v1/chat/completions", json=body).status_code
        except httpx.HTTPError as e:
            return type(e).__name__

    def push(self, sid: str) -> None:
        with httpx.Client(base_url=self.url, timeout=60.0) as c:
            i, t0 = 0, time.monotonic()
            while not self.stop.is_set():
                delay = t0 + i / self.args.fps - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                c.post(f"/v1/streams/{sid}/frames", params={"t_s": i / self.args.fps},
                       content=self.frames[i % len(self.frames)], headers={"Content-Type": "image/png"})
                i += 1


def open_hanging(url: str, hole: BlackHole, n: int) -> tuple[list[str], list[threading.Thread]]:
    """`n` streams opened on the black hole's URL at once; each one's outcome (the create reply, then its state)."""
    out = [""] * n

    def one(i: int) -> None:
        try:
            with httpx.Client(base_url=url, timeout=120.0) as c:
                r = c.post("/v1/streams", json={"source": f"http://{HOST}:{hole.port}/cam{i}.mp4", "fps": 2.0})
                if r.status_code != 201:
                    out[i] = f"{r.status_code} {r.text[:120]}"
                    return
                sid, t0 = r.json()["id"], time.monotonic()
                state = r.json().get("state")
                while state == "opening" and time.monotonic() - t0 < 120:  # until it fails (bounded)
                    time.sleep(0.5)
                    st = c.get(f"/v1/streams/{sid}").json()
                    state = f"{st.get('state')}: {st.get('error')}"
                out[i] = f"201 {r.json().get('state')}, then after {time.monotonic() - t0:.1f} s {state}"
        except httpx.HTTPError as e:
            out[i] = type(e).__name__

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return out, threads


def phase(url: str, model: str, pngs, args, adversary: bool, pid: int) -> tuple[dict, list[Camera]]:
    rss_before = rss_mb(pid)
    adv = hole = None
    extra = {}
    if adversary:
        hole = BlackHole()
        opens, open_threads = open_hanging(url, hole, 8)
        adv = Adversary(url, model, pngs[0], args)
        adv_thread = threading.Thread(target=adv.run, daemon=True)
        adv_thread.start()
        time.sleep(5.0)  # the adversary's watches are in and its first long questions under way
    cameras = run_cameras(url, model, pngs, args)
    if adversary:
        adv.stop.set()
        adv_thread.join(timeout=180)
        for t in open_threads:
            t.join(timeout=60)
        hole.close()
        extra = {"adversary_sizes": adv.sizes, "adversary_requests": adv.outcomes, "hanging_opens": opens}
    ttft = [x for cam in cameras for x in cam.ttft_ms]
    finals = [cam.final for cam in cameras]
    errors = [e for cam in cameras for e in cam.errors]
    return {
        "adversary": adversary,
        "frames_pushed": sum(cam.pushed for cam in cameras),
        "frames_dropped": sum(f.get("frames_dropped", 0) for f in finals),
        "questions": sum(cam.asked for cam in cameras), "answered": len(ttft),
        "ttft_ms_p50": pct(ttft, 0.5), "ttft_ms_p95": pct(ttft, 0.95),
        "server_rss_mb_before": rss_before, "server_rss_mb_after": rss_mb(pid),
        "errors": len(errors), "first_errors": errors[:3], **extra,
    }, cameras


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cameras", type=int, default=8)
    p.add_argument("--seconds", type=float, default=30.0, help="stream seconds per camera, per phase")
    p.add_argument("--fps", type=float, default=2.0)
    p.add_argument("--question-every-s", type=float, default=5.0)
    p.add_argument("--model", default=str(BUNDLED_MODEL))
    args = p.parse_args()
    if not 1 <= args.cameras <= MAX_CAMERAS or not 0 < args.seconds <= MAX_SECONDS:
        p.error(f"--cameras must be in 1..{MAX_CAMERAS} and --seconds in (0, {MAX_SECONDS:g}]")
    args.replicas = 1
    # room for the cameras, the adversary's stream and the 8 opening ones (the last --max-streams given counts)
    args.extra_serve_args = ["--allow-private-urls", "--source-open-timeout-s", "10",
                             "--max-streams", str(args.cameras + 16)]
    pngs = clip_pngs(args.fps, args.seconds)
    proc, url, startup_s, log = start_server(args, False)
    try:
        model = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
        print("adversarial_load: without the adversary ...", file=sys.stderr, flush=True)
        calm, calm_cams = phase(url, model, pngs, args, False, proc.pid)
        print("adversarial_load: with the adversary ...", file=sys.stderr, flush=True)
        loud, loud_cams = phase(url, model, pngs, args, True, proc.pid)
    finally:
        stop_server(proc)
        log.close()
    same = total = 0
    for a, b in zip(calm_cams, loud_cams):
        for key, text in a.answers.items():
            if key in b.answers:
                total += 1
                same += text == b.answers[key]
    loud["answers_equal_to_without"] = f"{same} of {total}"
    ratio = (loud["ttft_ms_p95"] / calm["ttft_ms_p95"]) if calm["ttft_ms_p95"] and loud["ttft_ms_p95"] else None
    print(json.dumps({"cameras": args.cameras, "seconds": args.seconds, "fps": args.fps,
                      "question_every_s": args.question_every_s, "model": os.path.basename(args.model.rstrip("/")),
                      "cpus": os.cpu_count(), "startup_s": round(startup_s, 1),
                      "ttft_p95_ratio": None if ratio is None else round(ratio, 2),
                      "rss_growth_mb": round(loud["server_rss_mb_after"] - loud["server_rss_mb_before"], 1),
                      "without": calm, "with": loud}, indent=2))


if __name__ == "__main__":
    main()
