"""One stream's latencies without and with an attacker on the sound, speech and webhook surfaces, side by side.

    python benchmarks/adversarial_sound.py [--attacks wav_rate,tts,spoken,appends,webhooks] [--seconds 20]

For each attack, one `streamvid serve` on 127.0.0.1 (a free port; loopback only; the bundled model) serves two
phases of the same length: "without" (a victim alone) and "with" (the same victim on a new stream, plus the
attacker). The victim pushes a bundled clip's frames at 2 fps paced by the wall clock, asks a streamed chat
completion every 4 s, and reads its stream's status every 0.5 s. Reported per phase: the victim's answer TTFT p50 /
p95, frame-push latency p50 / p95, status-read latency p50 / p95, the server's RSS growth (the highest RSS sampled
in the phase minus the RSS at its start), and the attacker's requests by outcome; then the ratios with / without.
The attackers:
- wav_rate: 3 clients sending, as fast as they are answered, a 144-byte WAV whose header says 2^30 Hz and a WAV
  at 1 Hz (19 KB) to a push stream's audio route, and the same bytes as a chat completion's input_audio part;
- tts: 12 clients asking /v1/audio/speech for 4,095 characters each, as fast as they are answered;
- spoken: 6 clients asking spoken questions as input_audio parts (espeak-ng speech, repeated, at 8 kHz): 29 s, the
  longest heard (30 s), three times in four, and 94 s (refused by its length);
- appends: 8 realtime sockets sending 30 s of speech each in 20 s as input_audio_buffer.append messages;
- webhooks: the server POSTs alerts to a dead receiver (a port that accepts and never answers) and a healthy one;
  3 attacker streams with 32 watches each that hold on their clip; reported too: the victim's alerts at the
  healthy receiver (how many, and their delay from the alert's emission to arrival).
The attackers are client threads in a process of their own (`--attacker-nice` lowers its CPU priority; default 0,
none), so their Python never holds the victim's interpreter lock: what the victim measures is the server.
Bounded: every request has a timeout, every phase at most 600 s, the servers are stopped at the end.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import multiprocessing
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import wave
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np

from adversarial_load import BlackHole, rss_mb
from serve_load import HOST, MAX_SECONDS, clip_pngs, pct, start_server, stop_server

from streamvid.config import BUNDLED_MODEL

ATTACKS = ("wav_rate", "tts", "spoken", "appends", "webhooks")
QUESTIONS = ("How many shapes are on screen?", "What shape is blue?", "The star is which colour?")
WATCH = "a shape is on screen"  # holds on every ShapesWorld clip: an alert soon after each watch starts


def wav_header(rate: int, data: bytes, channels: int = 1, bits: int = 16) -> bytes:
    """A RIFF/WAVE file around `data`, with whatever rate its header should claim."""
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * channels * bits // 8, channels * bits // 8, bits)
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<I", 16) + fmt + b"data" +
            struct.pack("<I", len(data)) + data)


def speech_wav(seconds: float, rate: int = 16000) -> bytes:
    """About `seconds` of espeak-ng speech (a sentence repeated), as a 16 kHz mono PCM16 WAV."""
    if shutil.which("espeak-ng") is None:
        raise SystemExit("adversarial_sound: the spoken and appends attacks need espeak-ng (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.wav")
        subprocess.run(["espeak-ng", "-w", path, "What colour is the circle on the left of the screen now?"],
                       check=True, capture_output=True)
        with wave.open(path) as w:
            one = np.frombuffer(w.readframes(w.getnframes()), "<i2")
            src_rate = w.getframerate()
    one = np.interp(np.arange(int(len(one) * rate / src_rate)) * src_rate / rate, np.arange(len(one)), one)
    reps = int(np.ceil(seconds * rate / len(one)))
    pcm = np.tile(one.astype("<i2"), reps)[: int(seconds * rate)]
    return wav_header(rate, pcm.tobytes())


class Sampler:
    """The server's RSS every 0.2 s, on a thread, while running."""

    def __init__(self, pid: int):
        self.pid, self.samples, self.stop = pid, [], threading.Event()
        self.start_mb = rss_mb(pid)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                self.samples.append(rss_mb(self.pid))
            except OSError:
                return

    def growth_mb(self) -> float:
        self.stop.set()
        return round(max(self.samples, default=self.start_mb) - self.start_mb, 1)


class Victim:
    """A push stream at 2 fps with a question every 4 s and a status read every 0.5 s, for `seconds`."""

    def __init__(self, url: str, model: str, frames: list[bytes], seconds: float, fps: float = 2.0):
        self.url, self.model, self.frames, self.seconds, self.fps = url, model, frames, seconds, fps
        self.push_ms: list[float] = []
        self.status_ms: list[float] = []
        self.ttft_ms: list[float] = []
        self.errors: list[str] = []
        self.sid: str | None = None

    def run(self) -> None:
        done = threading.Event()
        askers: list[threading.Thread] = []
        with httpx.Client(base_url=self.url, timeout=60.0) as c:
            self.sid = c.post("/v1/streams", json={"source": "push", "fps": self.fps}).json()["id"]
            reader = threading.Thread(target=self._status, args=(done,), daemon=True)
            reader.start()
            start = time.monotonic()
            for i in range(int(self.seconds * self.fps)):
                if (delay := start + i / self.fps - time.monotonic()) > 0:
                    time.sleep(delay)
                t0 = time.perf_counter()
                try:
                    r = c.post(f"/v1/streams/{self.sid}/frames", params={"t_s": i / self.fps},
                               content=self.frames[i % len(self.frames)], headers={"Content-Type": "image/png"})
                    self.push_ms.append(1000 * (time.perf_counter() - t0))
                    if r.status_code != 200:
                        self.errors.append(f"frame {i}: {r.status_code}")
                except httpx.HTTPError as e:
                    self.errors.append(f"frame {i}: {type(e).__name__}")
                if i and i % int(4 * self.fps) == 0:
                    t = threading.Thread(target=self._ask, args=(QUESTIONS[i % len(QUESTIONS)],), daemon=True)
                    t.start()
                    askers.append(t)
            for t in askers:
                t.join(timeout=120)
            done.set()
            reader.join(timeout=30)
            c.delete(f"/v1/streams/{self.sid}")

    def _status(self, done: threading.Event) -> None:
        with httpx.Client(base_url=self.url, timeout=60.0) as c:
            while not done.wait(0.5):
                t0 = time.perf_counter()
                try:
                    c.get(f"/v1/streams/{self.sid}")
                    self.status_ms.append(1000 * (time.perf_counter() - t0))
                except httpx.HTTPError as e:
                    self.errors.append(f"status: {type(e).__name__}")

    def _ask(self, question: str) -> None:
        body = {"model": self.model, "stream_id": self.sid, "stream": True,
                "messages": [{"role": "user", "content": question}]}
        t0 = time.perf_counter()
        try:
            with httpx.stream("POST", f"{self.url}/v1/chat/completions", json=body, timeout=120.0) as r:
                for line in r.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        chunk = json.loads(line.removeprefix("data: "))
                        if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                            self.ttft_ms.append(1000 * (time.perf_counter() - t0))
                            return
            self.errors.append(f"question: {r.status_code}, no content")
        except httpx.HTTPError as e:
            self.errors.append(f"question: {type(e).__name__}")


class Attacker:
    """Threads that send requests until `stop`, counting outcomes (HTTP status, or the exception's name)."""

    def __init__(self):
        self.outcomes: Counter = Counter()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def count(self, what: str) -> None:
        with self.lock:
            self.outcomes[what] += 1

    def spawn(self, n: int, fn) -> None:
        for i in range(n):
            t = threading.Thread(target=self._loop, args=(fn, i), daemon=True)
            t.start()
            self.threads.append(t)

    def _loop(self, fn, i: int) -> None:
        with httpx.Client(timeout=60.0) as c:
            while not self.stop.is_set():
                try:
                    fn(c, i)
                except httpx.HTTPError as e:
                    self.count(type(e).__name__)
                    self.stop.wait(0.1)

    def post(self, c: httpx.Client, what: str, url: str, **kw) -> None:
        r = c.post(url, **kw)
        self.count(f"{what} {r.status_code}")

    def finish(self) -> dict:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)
        return dict(sorted(self.outcomes.items()))


def attacker_process(kind: str, url: str, model: str, frames: list[bytes], nice: int, ready, stop, results) -> None:
    """The attack `kind` in this (child) process until `stop` is set; its outcomes put on `results`."""
    if nice:
        os.nice(nice)
    a = Attacker()
    attack(kind, url, model, frames, a)
    ready.set()
    stop.wait(MAX_SECONDS + 300)
    results.put(a.finish())


class AttackerProcess:
    """An attack run in a process of its own (spawned): started, ready once its setup is done, then finished."""

    def __init__(self, kind: str, url: str, model: str, frames: list[bytes], nice: int):
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.stop, self.results = ctx.Event(), ctx.Event(), ctx.Queue()
        self.proc = ctx.Process(target=attacker_process, daemon=True,
                                args=(kind, url, model, frames, nice, self.ready, self.stop, self.results))
        self.proc.start()
        if not self.ready.wait(300):
            raise RuntimeError(f"the {kind} attacker did not start within 300 s")

    def finish(self) -> dict:
        self.stop.set()
        outcomes = self.results.get(timeout=300)
        self.proc.join(timeout=60)
        return outcomes


def push_stream(url: str) -> str:
    return httpx.post(f"{url}/v1/streams", json={"source": "push", "fps": 2.0}, timeout=60).json()["id"]


def attack(kind: str, url: str, model: str, frames: list[bytes], a: Attacker) -> None:
    if kind == "wav_rate":
        sid = push_stream(url)
        huge = wav_header(2**30, bytes(100))  # 144 bytes
        slow = wav_header(1, bytes(19_000))

        def send(c: httpx.Client, i: int) -> None:
            body = (huge, slow)[i % 2]
            a.post(c, "audio", f"{url}/v1/streams/{sid}/audio", content=body, headers={"Content-Type": "audio/wav"})
            part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(body).decode(), "format": "wav"}}
            a.post(c, "chat", f"{url}/v1/chat/completions", json={"model": model, "stream_id": sid,
                   "messages": [{"role": "user", "content": [part]}]})
        a.spawn(3, send)
    elif kind == "tts":
        text = ("The red circle is left of the blue star. " * 100)[:4095]

        def send(c: httpx.Client, i: int) -> None:
            a.post(c, "speech", f"{url}/v1/audio/speech", json={"model": model, "input": text, "voice": "alloy"})
        a.spawn(12, send)
    elif kind == "spoken":
        sid = push_stream(url)
        # the longest spoken questions that reach the recogniser: 29 s (the bound is 30 s) at 8 kHz, whose base64 fits
        # the 1-MB JSON body (at 16 kHz it does not); and one of 94 s, refused by its length before recognition
        bodies = [base64.b64encode(speech_wav(s, rate=8000)).decode() for s in (29, 29, 29, 94)]

        def send(c: httpx.Client, i: int) -> None:
            part = {"type": "input_audio", "input_audio": {"data": bodies[i % len(bodies)], "format": "wav"}}
            a.post(c, "chat", f"{url}/v1/chat/completions", json={"model": model, "stream_id": sid,
                   "messages": [{"role": "user", "content": [part]}]})
        a.spawn(6, send)
    elif kind == "appends":
        from websockets.sync.client import connect

        with wave.open(io.BytesIO(speech_wav(30.0, rate=24000))) as w:
            pcm = w.readframes(w.getnframes())
        piece = 24000 * 2 // 10  # 0.1 s of PCM16 at 24 kHz
        pieces = [base64.b64encode(pcm[i:i + piece]).decode() for i in range(0, len(pcm), piece)]

        def sock(i: int) -> None:
            sid = push_stream(url)
            ws_url = url.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime"
            try:
                with connect(ws_url, open_timeout=30, close_timeout=5, max_size=None) as ws:
                    while not a.stop.is_set():
                        t0 = time.monotonic()
                        for n, b64 in enumerate(pieces):  # 30 s of sound in 20 s
                            if a.stop.is_set():
                                return
                            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64}))
                            a.count("append sent")
                            if (delay := t0 + n * 20.0 / len(pieces) - time.monotonic()) > 0:
                                time.sleep(delay)
                            while True:  # what the server said meanwhile (errors counted by their code)
                                try:
                                    msg = json.loads(ws.recv(timeout=0))
                                except TimeoutError:
                                    break
                                if msg.get("type") == "error":
                                    err = msg.get("error") or {}
                                    a.count(f"error {err.get('code') or msg.get('status') or ''}".strip())
            except Exception as e:  # noqa: BLE001 - counted
                a.count(f"socket {type(e).__name__}")
        for i in range(8):
            t = threading.Thread(target=sock, args=(i,), daemon=True)
            t.start()
            a.threads.append(t)
    elif kind == "webhooks":
        for _ in range(3):
            sid = push_stream(url)
            for w in range(32):
                r = httpx.post(f"{url}/v1/streams/{sid}/watches", json={"condition": f"{WATCH} {w}"}, timeout=60)
                a.count(f"watch {r.status_code}")

            def feed(c: httpx.Client, i: int, sid=sid) -> None:
                for n in range(10**6):
                    if a.stop.wait(0.5):
                        return
                    r = c.post(f"{url}/v1/streams/{sid}/frames", params={"t_s": n / 2.0},
                               content=frames[n % len(frames)], headers={"Content-Type": "image/png"})
                    a.count(f"frame {r.status_code}")
            a.spawn(1, feed)


class Receiver:
    """A webhook receiver on 127.0.0.1 that records each alert's arrival time; closed at the end."""

    def __init__(self):
        got = self.got = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                got.append((time.time(), json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.url = f"http://{HOST}:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def phase(url: str, pid: int, model: str, frames: list[bytes], seconds: float, kind: str | None,
          receiver: Receiver | None, nice: int = 0) -> dict:
    sampler = Sampler(pid)
    attacker = AttackerProcess(kind, url, model, frames, nice) if kind is not None else None
    victim = Victim(url, model, frames, seconds)
    t_watch = time.time()
    if receiver is not None:  # the victim watches too: its alerts at the healthy receiver are timed
        receiver.got.clear()
    runner = threading.Thread(target=victim.run, daemon=True)
    runner.start()
    if receiver is not None:
        while victim.sid is None and runner.is_alive():
            time.sleep(0.05)
        httpx.post(f"{url}/v1/streams/{victim.sid}/watches", json={"condition": WATCH}, timeout=60)
    runner.join(timeout=seconds + 300)
    outcomes = attacker.finish() if attacker is not None else {}
    out = {"ttft_ms_p50": pct(victim.ttft_ms, 0.5), "ttft_ms_p95": pct(victim.ttft_ms, 0.95),
           "answers": len(victim.ttft_ms), "push_ms_p50": pct(victim.push_ms, 0.5),
           "push_ms_p95": pct(victim.push_ms, 0.95), "status_ms_p50": pct(victim.status_ms, 0.5),
           "status_ms_p95": pct(victim.status_ms, 0.95), "rss_growth_mb": sampler.growth_mb(),
           "victim_errors": len(victim.errors), "first_victim_errors": victim.errors[:3], "attacker": outcomes}
    if receiver is not None:
        mine = [(t, body) for t, body in receiver.got if body.get("stream_id") == victim.sid]
        out["victim_alerts_received"] = len(mine)
        out["victim_alert_first_s_after_watch"] = round(min(t for t, _ in mine) - t_watch, 2) if mine else None
        out["alerts_received_all_streams"] = len(receiver.got)
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return round(b / a, 2) if a and b is not None else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attacks", default=",".join(ATTACKS))
    p.add_argument("--seconds", type=float, default=20.0, help="stream seconds per phase")
    p.add_argument("--model", default=str(BUNDLED_MODEL))
    p.add_argument("--attacker-nice", type=int, default=0, metavar="N",
                   help="the attacking clients' process runs at this niceness (0: as the victim)")
    args = p.parse_args()
    kinds = [k.strip() for k in args.attacks.split(",") if k.strip()]
    if not kinds or set(kinds) - set(ATTACKS):
        p.error(f"--attacks takes {', '.join(ATTACKS)}")
    if not 0 < args.seconds <= MAX_SECONDS:
        p.error(f"--seconds must be in (0, {MAX_SECONDS:g}]")
    frames = clip_pngs(2.0, args.seconds)[0]
    results = {}
    for kind in kinds:
        print(f"adversarial_sound: {kind} ...", file=sys.stderr, flush=True)
        receiver = dead = None
        args.cameras = 16  # --max-streams: the victim, and up to 8 attacker streams
        args.extra_serve_args = []
        if kind == "webhooks":
            receiver, dead = Receiver(), BlackHole()
            args.extra_serve_args = ["--alert-webhook", f"http://{HOST}:{dead.port}/hook",
                                     "--alert-webhook", receiver.url]
        proc, url, _, log = start_server(args, ray=False)
        try:
            model = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
            without = phase(url, proc.pid, model, frames, args.seconds, None, receiver)
            with_ = phase(url, proc.pid, model, frames, args.seconds, kind, receiver, args.attacker_nice)
        finally:
            stop_server(proc)
            log.close()
            if receiver is not None:
                receiver.close()
                dead.close()
        keys = ("ttft_ms_p95", "push_ms_p95", "status_ms_p95")
        results[kind] = {"without": without, "with": with_,
                         "with_over_without": {k: ratio(without[k], with_[k]) for k in keys}}
    print(json.dumps({"seconds": args.seconds, "attacker_nice": args.attacker_nice, "model": os.path.basename(args.model.rstrip("/")),
                      "cpus": os.cpu_count(), "attacks": results}, indent=2))


if __name__ == "__main__":
    main()
