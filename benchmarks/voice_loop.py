"""The voice loop through the realtime socket: how soon a spoken question is answered aloud, and whether spoken
questions are answered as well as typed ones.

    python benchmarks/voice_loop.py [--quick] [--work DIR] [--model DIR]

A `streamvid serve` child with its defaults (the bundled model, `--asr whisper-tiny.en`, `--tts auto`: the best
voice installed, turn detection `server_vad` with the default 500-ms pause, wake word "assistant") on 127.0.0.1.
Held-out ShapesWorld streams (`streamvid synth --seed S --minutes 3 --speech off`, seeds 9401-9402, never used for
training) are played into push streams in real time over the socket: every frame as `input_image` at its own time
(the video's frames at 2 fps, JPEG), and the microphone as `input_audio_buffer.append` (24 kHz PCM16, 100-ms
chunks, silence between questions). Their "realtime_*" questions (what is on screen now, gold answers scored with
the episode's own scorer, `eval.metrics.score`), at least MIN_GAP_S apart, are asked twice, in two runs of the
same stream:
- spoken: "Assistant, <question>" said by espeak-ng (en-us), timed so that the speech ends at the question's time;
- typed: `{"type": "question"}` sent at the question's time.
Loop latency, per spoken question: from the wall time the chunk holding the last voiced sample was sent (the end
of the question) to the first `response.output_audio.delta` of its response; also from the server's
`input_audio_buffer.speech_stopped` to that delta. Accuracy: the final answer text against the gold answer;
a spoken question that was not heard as one (no wake word recognised) counts as wrong.

Prints progress on stderr and one JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path

import av
import httpx
import numpy as np
from PIL import Image
from websockets.sync.client import connect

from streamvid.eval.metrics import score
from streamvid.serve.speech_route import server_voice

SEEDS = (9401, 9402)
MINUTES = 3.0
FPS = 2.0
RATE = 24000
CHUNK_S = 0.1
MIN_GAP_S = 12.0  # between questions asked (an answer and its speech are over before the next question)
PER_STREAM = 10
TARGETS = {"loop_p50_s": 1.5, "loop_p95_s": 2.5, "spoken_minus_typed_max": 0.10}


def log(msg: str) -> None:
    print(f"[voice_loop {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def questions(episodes: Path, n: int) -> list[dict]:
    """Up to n realtime questions of the stream, MIN_GAP_S apart, each with its gold answer and scorer."""
    ep = json.loads(episodes.read_text().splitlines()[0])
    gold = {e["ref"]: e for e in ep["events"] if e["kind"] == "expected_answer"}
    out, last = [], -1e9
    for e in ep["events"]:
        if e["kind"] == "user_query" and e.get("task", "").startswith("realtime_") and e["id"] in gold:
            if e["t"] - last >= MIN_GAP_S and e["t"] >= 6.0 and e["t"] <= MINUTES * 60 - 10:
                out.append({"t": e["t"], "text": e["text"], "gold": gold[e["id"]]["gold"]["text"],
                            "scorer": gold[e["id"]].get("scorer", "exact"), "task": e["task"]})
                last = e["t"]
    return out[:n]


def speech(text: str, work: Path) -> np.ndarray:
    """espeak-ng's en-us voice saying `text`, as 24 kHz int16."""
    out = work / "q.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(out), text], check=True, timeout=30)
    with wave.open(str(out)) as w:
        x = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32)
        src = w.getframerate()
    t = np.arange(int(len(x) * RATE / src)) / RATE
    return np.interp(t, np.arange(len(x)) / src, x).astype("<i2")


def frames(video: Path) -> list[tuple[float, str]]:
    """(t_s, base64 JPEG) of the video at FPS."""
    out, next_t = [], 0.0
    with av.open(str(video)) as c:
        for f in c.decode(video=0):
            t = float(f.time)
            if t + 1e-6 < next_t:
                continue
            buf = io.BytesIO()
            Image.fromarray(f.to_ndarray(format="rgb24")).save(buf, "JPEG", quality=90)
            out.append((round(t, 3), base64.b64encode(buf.getvalue()).decode()))
            next_t += 1 / FPS
    return out


def play(url: str, video_frames: list, qs: list[dict], spoken: bool, work: Path) -> list[dict]:
    """One run of a stream in real time; per question: its answer, and for spoken ones the latencies."""
    http = httpx.Client(base_url=url, timeout=60.0)
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    duration = video_frames[-1][0] + 1.0
    mic = np.zeros(int(duration * RATE), "<i2")
    voiced_end = []  # per question: the stream time its last voiced sample is at
    for q in qs:
        x = speech(f"Assistant, {q['text']}", work) if spoken else np.zeros(0, "<i2")
        loud = np.flatnonzero(np.abs(x.astype(np.int32)) > 300) if spoken else np.zeros(1, int)
        end = int(q["t"] * RATE)
        start = end - (int(loud[-1]) + 1 if spoken else 0)
        if spoken:
            mic[start:start + len(x)] = x[:len(mic) - start]
        voiced_end.append(end / RATE)
    events: list[tuple[float, dict]] = []
    sent_end: dict[int, float] = {}  # question index -> wall time the chunk with its last voiced sample was sent
    typed_at: dict[int, float] = {}
    qids: dict[int, str] = {}
    with connect(url.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime", max_size=2**24) as ws:
        done = threading.Event()

        def reader() -> None:
            while not done.is_set():
                try:
                    m = json.loads(ws.recv(timeout=1.0))
                except TimeoutError:
                    continue
                except Exception:  # noqa: BLE001 - closed
                    return
                events.append((time.monotonic(), m))

        t_read = threading.Thread(target=reader, daemon=True)
        t_read.start()
        t0 = time.monotonic() + 0.5
        fi, ci, qi = 0, 0, 0
        n_chunks = int(duration / CHUNK_S)
        while ci < n_chunks or fi < len(video_frames):
            next_frame = video_frames[fi][0] if fi < len(video_frames) else 1e9
            next_chunk = (ci + 1) * CHUNK_S if ci < n_chunks else 1e9  # a chunk is sent once its last sample played
            next_q = qs[qi]["t"] if (not spoken and qi < len(qs)) else 1e9
            t_next = min(next_frame, next_chunk, next_q)
            if (wait := t0 + t_next - time.monotonic()) > 0:
                time.sleep(wait)
            if t_next == next_q:
                ws.send(json.dumps({"type": "question", "text": qs[qi]["text"]}))
                typed_at[qi] = time.monotonic()
                qi += 1
            elif t_next == next_frame:
                ws.send(json.dumps({"type": "input_image", "image": video_frames[fi][1], "t_s": video_frames[fi][0]}))
                fi += 1
            else:
                lo, hi = int(ci * CHUNK_S * RATE), int((ci + 1) * CHUNK_S * RATE)
                if spoken:
                    ws.send(json.dumps({"type": "input_audio_buffer.append", "t_s": round(ci * CHUNK_S, 3),
                                        "audio": base64.b64encode(mic[lo:hi].tobytes()).decode()}))
                    for i, end in enumerate(voiced_end):
                        if lo / RATE < end <= hi / RATE:
                            sent_end[i] = time.monotonic()
                ci += 1
        time.sleep(15.0)  # the last answer is spoken
        done.set()
        t_read.join(timeout=5)
    http.delete(f"/v1/streams/{sid}")
    http.close()
    return collate(events, qs, spoken, sent_end, typed_at, qids)


def collate(events, qs, spoken, sent_end, typed_at, qids) -> list[dict]:
    msgs = [m for _, m in events]
    answers = {m["id"]: m for m in msgs if m.get("type") == "answer"}
    out = []
    if spoken:
        # each spoken question: the transcript with a question_id whose end is nearest after its time
        spoken_q = [m for m in msgs if m.get("type") == "transcript" and m.get("question_id")]
        for i, q in enumerate(qs):
            near = [m for m in spoken_q if abs(m["t_end_s"] - q["t"]) < 3.0]
            row = {"t": q["t"], "question": q["text"], "gold": q["gold"], "task": q["task"]}
            if not near:
                row.update(heard=None, answer=None, correct=False)
                out.append(row)
                continue
            tr = near[0]
            answer = answers.get(tr["question_id"], {}).get("text")
            row.update(heard=tr["text"], answer=answer,
                       correct=answer is not None and score(answer, q["gold"], q["scorer"]))
            rid = next((m["response"]["id"] for m in msgs if m.get("type") == "response.done"
                        and m["response"].get("question_id") == tr["question_id"]), None)
            first_audio = next((w for w, m in events if m.get("type") == "response.output_audio.delta"
                                and m.get("response_id") == rid), None)
            stopped = [w for w, m in events if m.get("type") == "input_audio_buffer.speech_stopped"
                       and abs(m["audio_end_ms"] / 1000 - q["t"]) < 1.0]
            first_text = next((w for w, m in events if m.get("type") == "response.output_text.delta"
                               and m.get("response_id") == rid), None)
            if first_audio is not None and i in sent_end:
                row["loop_s"] = round(first_audio - sent_end[i], 3)
                if stopped:
                    row["speech_stopped_to_audio_s"] = round(first_audio - stopped[0], 3)
                if first_text is not None:
                    row["end_to_first_text_s"] = round(first_text - sent_end[i], 3)
            out.append(row)
    else:
        acks = [(w, m) for w, m in events if m.get("type") == "ack" and m.get("for") == "question"]
        for i, q in enumerate(qs):
            qid = acks[i][1]["id"] if i < len(acks) else None
            answer = answers.get(qid, {}).get("text") if qid else None
            out.append({"t": q["t"], "question": q["text"], "gold": q["gold"], "task": q["task"], "answer": answer,
                        "correct": answer is not None and score(answer, q["gold"], q["scorer"])})
    return out


def quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, max(0, int(np.ceil(q * len(xs))) - 1))], 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one stream, 5 questions")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--model", default=None, help="serve this checkpoint instead of the bundled one")
    args = ap.parse_args()
    if shutil.which("espeak-ng") is None:
        print("espeak-ng is needed to speak the questions: apt-get install espeak-ng", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="voice_loop_"))
    work.mkdir(parents=True, exist_ok=True)
    seeds, per = (SEEDS[:1], 5) if args.quick else (SEEDS, PER_STREAM)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    model = ["--model", args.model] if args.model else []
    server = subprocess.Popen([sys.executable, "-m", "streamvid.cli", "serve", "--port", str(port), *model],
                              stdout=subprocess.DEVNULL, stderr=open(work / "serve.log", "w"),
                              env={**os.environ})
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            raise RuntimeError("the server did not start: see serve.log")
        rows = {"spoken": [], "typed": []}
        for seed in seeds:
            out = work / f"s{seed}"
            if not (out / "episodes.jsonl").is_file():
                subprocess.run([sys.executable, "-m", "streamvid.cli", "synth", "--seed", str(seed), "--minutes",
                                str(MINUTES), "--out", str(out), "--speech", "off"], check=True,
                               stdout=subprocess.DEVNULL)
            qs = questions(out / "episodes.jsonl", per)
            video_frames = frames(out / f"shapes_{seed}.mp4")
            for mode in ("spoken", "typed"):
                log(f"seed {seed}: {len(qs)} questions, {mode}")
                rows[mode] += play(url, video_frames, qs, mode == "spoken", work)
        loops = [r["loop_s"] for r in rows["spoken"] if "loop_s" in r]
        after_vad = [r["speech_stopped_to_audio_s"] for r in rows["spoken"] if "speech_stopped_to_audio_s" in r]
        first_text = [r["end_to_first_text_s"] for r in rows["spoken"] if "end_to_first_text_s" in r]
        acc = {m: round(sum(r["correct"] for r in rs) / max(1, len(rs)), 3) for m, rs in rows.items()}
        summary = {
            "settings": "streamvid serve defaults (--asr whisper-tiny.en, --tts auto, server_vad 500 ms)"
                        + (f" plus --model {args.model}" if args.model else ", the bundled model"),
            "model": args.model or "bundled",
            "answer_voice": server_voice("auto").name,
            "questions": len(rows["spoken"]),
            "heard_as_questions": sum(r.get("heard") is not None for r in rows["spoken"]),
            "loop_s": {"n": len(loops), "p50": quantile(loops, 0.5), "p95": quantile(loops, 0.95),
                       "max": max(loops, default=None)},
            "speech_stopped_to_audio_s": {"p50": quantile(after_vad, 0.5), "p95": quantile(after_vad, 0.95)},
            "end_to_first_text_s": {"p50": quantile(first_text, 0.5), "p95": quantile(first_text, 0.95)},
            "accuracy": acc,
            "rows": rows,
        }
        summary["met"] = {
            "loop_p50": summary["loop_s"]["p50"] is not None and summary["loop_s"]["p50"] <= TARGETS["loop_p50_s"],
            "loop_p95": summary["loop_s"]["p95"] is not None and summary["loop_s"]["p95"] <= TARGETS["loop_p95_s"],
            "spoken_vs_typed": acc["spoken"] >= acc["typed"] - TARGETS["spoken_minus_typed_max"]}
        print(json.dumps(summary, indent=1))
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
