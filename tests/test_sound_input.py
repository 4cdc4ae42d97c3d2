"""Sound from clients is checked before it costs anything: a WAV's header (rate, channels, format, length) before
PyAV decodes it, float samples that are not finite, clipping after a downmix, a per-stream sound budget with a
clock driven by hand, the audio route's own body cap, `t_s` bounds, the realtime socket's append cap and
`session.update`'s fields. The references are hand-built WAV bytes and hand-computed values; the server is driven
by real clients (httpx, a websockets client)."""

from __future__ import annotations

import base64
import json
import struct
import tracemalloc

import av
import httpx
import numpy as np
import pytest
from serve_helpers import config, engine, running, strict_json  # noqa: F401 - fixtures

from streamvid.audio.pcm import RATE, pcm16_samples, resample, wav_duration_s, wav_samples
from streamvid.hub import sound_budget
from streamvid.errors import Busy
from streamvid.hub.sound_budget import SoundBudget
from streamvid.serve import ServeOptions, build_app

websockets_sync = pytest.importorskip("websockets.sync.client")


def wav(data: bytes, rate: int, channels: int = 1, bits: int = 16, code: int = 1, data_size: int | None = None,
        extensible: bool = False) -> bytes:
    """A RIFF/WAVE file written byte by byte (the header says what the arguments say, true or not)."""
    block = channels * bits // 8
    if extensible:  # WAVE_FORMAT_EXTENSIBLE: the format code is the subformat GUID's first two bytes
        fmt = struct.pack("<HHIIHHHHI", 0xFFFE, channels, rate, rate * block, block, bits, 22, bits, 0)
        fmt += struct.pack("<H", code) + bytes.fromhex("000000001000800000aa00389b71")
    else:
        fmt = struct.pack("<HHIIHH", code, channels, rate, rate * block, block, bits)
    size = len(data) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", size) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def sine(rate: int, seconds: float, hz: float = 440.0, amplitude: float = 0.5) -> np.ndarray:
    return amplitude * np.sin(2 * np.pi * hz * np.arange(int(rate * seconds)) / rate)


def peak_hz(x: np.ndarray) -> float:
    return float(np.argmax(np.abs(np.fft.rfft(x))) * RATE / len(x))


# ---- headers that claim too much are refused before anything is decoded ------------------------------------
HOURS = 2 * 3600 * 16000 * 2  # the data size of two hours of 16 kHz mono PCM16
LIARS = [
    pytest.param(wav(b"\x00" * 100, 2**30), "1073741824 Hz", id="2^30 Hz in 144 bytes"),
    pytest.param(wav(b"\x00" * 19000, 1), "got 1 Hz", id="1 Hz"),
    pytest.param(wav(b"\x00" * 40000, 1, bits=8), "got 1 Hz", id="1 Hz, 8-bit"),
    pytest.param(wav(b"\x00" * 100, 16000, data_size=HOURS), "longer than the 600 s limit", id="hours by its size"),
    pytest.param(wav(b"\x00" * 100, 16000, channels=9), "9 channels", id="9 channels"),
    pytest.param(wav(b"\x00" * 100, 16000, bits=8, code=7), "format 0x0007", id="mu-law"),
    pytest.param(wav(b"\x00" * 100, 16000, bits=12), "12 bits", id="12-bit"),
]


@pytest.mark.parametrize("body, names", LIARS)
def test_a_header_that_claims_too_much_is_refused_without_decoding(body, names, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("PyAV was asked to open it")

    monkeypatch.setattr(av, "open", never)
    tracemalloc.start()
    try:
        for read in (wav_samples, wav_duration_s):
            with pytest.raises(ValueError) as e:
                read(body)
            assert names in str(e.value) and "\n" not in str(e.value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * 2**20, f"{peak / 2**20:.1f} MB allocated to refuse {len(body)} bytes"


def test_rates_are_bounded_for_raw_pcm_and_resampling_too():
    for rate in (1, 7999, 2**30):
        with pytest.raises(ValueError, match=f"rate must be 8000-192000 Hz, got {rate} Hz"):
            pcm16_samples(b"\x00\x00" * 10, rate)
        with pytest.raises(ValueError, match="rate must be"):
            resample(np.zeros(10, np.float32), rate)
    with pytest.raises(ValueError, match="longer than the 600 s limit"):  # 601 s at 8 kHz, checked before the work
        pcm16_samples(b"\x00\x00" * (601 * 8000), 8000)


@pytest.mark.parametrize("rate, channels, bits, code, encode, extensible", [
    (8000, 1, 8, 1, lambda x: np.round(x * 127 + 128).astype(np.uint8), False),  # 8-bit PCM is unsigned
    (22050, 1, 16, 1, lambda x: np.round(x * 32767).astype("<i2"), False),
    (48000, 1, 24, 1, lambda x: np.round(x * 2**23).astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3], False),
    (44100, 1, 32, 1, lambda x: np.round(x * 2**31).astype("<i4"), False),
    (32000, 1, 32, 3, lambda x: x.astype("<f4"), False),
    (16000, 1, 64, 3, lambda x: x.astype("<f8"), False),
    (24000, 1, 16, 1, lambda x: np.round(x * 32767).astype("<i2"), True),
])
def test_every_taken_format_decodes_to_the_same_sine(rate, channels, bits, code, encode, extensible):
    x = sine(rate, 1.0, hz=440.0, amplitude=0.5)
    y = wav_samples(wav(encode(x).tobytes(), rate, channels, bits, code, extensible=extensible))
    assert abs(len(y) - RATE) <= 64  # one second at RATE
    middle = y[2000:-2000]
    assert abs(peak_hz(middle) - 440) < 5 and abs(np.abs(middle).max() - 0.5) < 0.02


def test_float_samples_that_are_not_finite_are_refused_and_loud_ones_clipped():
    for bad in (np.nan, np.inf, -np.inf):
        x = sine(16000, 0.5).astype("<f4")
        x[100] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            wav_samples(wav(x.tobytes(), 16000, bits=32, code=3))
    x = sine(16000, 0.5).astype("<f4")
    x[::50] = 1e30
    x[25::50] = -1e30
    y = wav_samples(wav(x.tobytes(), 16000, bits=32, code=3))
    assert np.isfinite(y).all() and y.max() == 1.0 and y.min() == -1.0


@pytest.mark.parametrize("channels", [2, 6, 8])
def test_a_downmix_is_clipped(channels):
    """The same 0.9 sine on every channel: the resampler's downmix adds them up (1.27 for two, 3.97 for eight);
    what is heard stays within [-1, 1]."""
    x = np.repeat(sine(16000, 0.5, amplitude=0.9)[:, None], channels, axis=1)
    for body in (wav(np.round(x * 32767).astype("<i2").tobytes(), 16000, channels),
                 wav(x.astype("<f4").tobytes(), 16000, channels, bits=32, code=3, extensible=True)):
        y = wav_samples(body)
        assert abs(len(y) - 8000) <= 64 and np.abs(y).max() <= 1.0 and np.abs(y).max() > 0.85


def test_a_streamed_wav_of_unknown_size_is_measured_by_its_bytes():
    x = np.round(sine(16000, 0.5) * 32767).astype("<i2").tobytes()
    for unknown in (0, 0xFFFFFFFF):
        body = wav(x, 16000, data_size=unknown)
        assert wav_duration_s(body) == pytest.approx(0.5) and len(wav_samples(body)) == 8000


# ---- the sound budget, on a clock driven by hand ---------------------------------------------------------------
class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_budget_takes_a_burst_then_twice_real_time():
    clock = Clock()
    budget = SoundBudget(clock=clock)
    budget.take(6.0)
    budget.take(6.0)  # the burst (10 s) is not in debt before this one: taken, 2 s of debt
    with pytest.raises(Busy, match=r"faster than 2x real time.*in 1 s"):
        budget.take(0.1)
    clock.t += 0.9  # 1.8 s paid back of 2
    with pytest.raises(Busy):
        budget.take(0.1)
    clock.t += 0.1
    budget.take(0.1)
    assert budget.available_s() == pytest.approx(-0.1)
    budget.give_back(0.1)  # a push refused after the budget took it (a body that did not decode)
    assert budget.available_s() == pytest.approx(0.0)
    clock.t += 60
    budget.give_back(5.0)
    assert budget.available_s() == 10.0  # never beyond the burst


def test_a_real_time_sender_is_never_refused_and_a_fast_one_gets_twice_real_time():
    clock = Clock()
    budget = SoundBudget(clock=clock)
    for _ in range(3000):  # 300 s of 0.1-s appends in real time
        clock.t += 0.1
        budget.take(0.1)
    clock, taken = Clock(), 0.0
    budget = SoundBudget(clock=clock)
    for _ in range(3000):  # 0.1-s appends every 0.02 s: five times real time, for 60 s
        clock.t += 0.02
        try:
            budget.take(0.1)
            taken += 0.1
        except Busy:
            pass
    assert 2 * 60 <= taken <= 2 * 60 + 10 + 0.1 + 1e-6


# ---- the server: its doors ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(engine):  # noqa: F811
    app = build_app(engine, ServeOptions(max_new_tokens=4, tts="off"))  # max_body_mb 32, max_json_mb 1
    with running(app) as url:
        yield url


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server, timeout=60.0) as client:
        yield client


@pytest.fixture
def clock(monkeypatch):
    """Every sound budget made from now on reads this clock (it moves only when a test moves it)."""
    clock = Clock()
    monkeypatch.setattr(sound_budget, "clock", clock)
    return clock


@pytest.fixture
def sid(http):
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    yield sid
    http.delete(f"/v1/streams/{sid}")


def _error(r: httpx.Response, status: int) -> str:
    message = strict_json(r.text)["error"]["message"]
    assert r.status_code == status and "\n" not in message, (r.status_code, message)
    return message


def test_a_lying_header_is_refused_at_every_door(http, sid):
    """POST /audio and a chat completion's input_audio (the page's "Hold to talk" microphone asks the hub the same
    way as the latter): one-line 400s that name the rate, and the stream goes on."""
    liar = wav(b"\x00" * 100, 2**30)
    assert "1073741824 Hz" in _error(http.post(f"/v1/streams/{sid}/audio", content=liar,
                                               headers={"content-type": "audio/wav"}), 400)
    assert "rate must be" in _error(http.post(f"/v1/streams/{sid}/audio?rate=1", content=b"\x00\x00" * 100,
                                              headers={"content-type": "audio/pcm"}), 400)
    model = http.get("/v1/models").json()["data"][0]["id"]
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(liar).decode(), "format": "wav"}}
    r = http.post("/v1/chat/completions", json={"model": model, "stream_id": sid,
                                                "messages": [{"role": "user", "content": [part]}]})
    assert "1073741824 Hz" in _error(r, 400)
    ok = http.post(f"/v1/streams/{sid}/audio?t_s=0", content=wav(b"\x00\x00" * 1600, 16000),
                   headers={"content-type": "audio/wav"})
    assert ok.status_code == 200 and ok.json()["t_end_s"] == 0.1


def test_sound_times_beyond_ten_years_are_refused(http, sid):
    for t_s in ("1e300", "inf", "-1", "315360001"):
        message = _error(http.post(f"/v1/streams/{sid}/audio?rate=16000&t_s={t_s}", content=b"\x00\x00" * 160,
                                   headers={"content-type": "audio/pcm"}), 400)
        assert "t_s" in message
    r = http.post(f"/v1/streams/{sid}/audio?rate=16000&t_s=315360000", content=b"\x00\x00" * 160,
                  headers={"content-type": "audio/pcm"})
    assert r.status_code == 200 and r.json()["t_s"] == 315360000


def test_the_audio_route_takes_bodies_above_the_json_cap_up_to_its_own(http, sid, clock):
    two_mb = b"\x00\x00" * (2**20 + 16000)  # 43.7 s of 24 kHz PCM16 (the JSON cap is 1 MB)
    r = http.post(f"/v1/streams/{sid}/audio?rate=24000&t_s=0", content=two_mb, headers={"content-type": "audio/pcm"})
    assert r.status_code == 200, r.text
    assert r.json()["t_end_s"] == pytest.approx(len(two_mb) / 2 / 24000, abs=1e-3)
    big = b"\x00" * (33 * 2**20)
    assert "32 MB limit" in _error(http.post(f"/v1/streams/{sid}/audio?rate=24000", content=big,
                                             headers={"content-type": "audio/pcm"}), 413)


def test_one_budget_for_the_streams_socket_and_its_http_route(server, http, sid, clock):
    """Appends on the realtime socket past the burst get a 429 error event and the socket stays open; the HTTP
    route shares the stream's budget; once the clock has moved, sound is taken again."""
    second = base64.b64encode(b"\x00\x00" * 24000).decode()  # 1 s at 24 kHz

    def exchange(ws, message: dict) -> dict | None:
        """Send `message`, then a bad one: the reply to the first, or None when it was taken silently."""
        ws.send(json.dumps(message))
        ws.send(json.dumps({"type": "nothing"}))
        reply = strict_json(ws.recv(timeout=60))
        if reply.get("type") == "error" and "unknown message type" in reply["message"]:
            return None
        assert strict_json(ws.recv(timeout=60))["type"] == "error"  # the bad message's
        return reply

    with websockets_sync.connect(server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime") as ws:
        append = {"type": "input_audio_buffer.append", "audio": second}
        for _ in range(11):  # the 10-s burst, and the one that takes the bucket into debt
            assert exchange(ws, append) is None
        refused = exchange(ws, append)
        assert refused["type"] == "error" and refused["status"] == 429 and "2x real time" in refused["message"]
        r = http.post(f"/v1/streams/{sid}/audio?rate=24000", content=b"\x00\x00" * 2400,
                      headers={"content-type": "audio/pcm"})
        assert "2x real time" in _error(r, 429)
        clock.t += 0.5 + 1e-6  # 1 s of debt paid back at 2x real time
        back = exchange(ws, {**append, "t_s": 0.0})  # refused for its time: what the budget took is given back
        assert back["status"] == 400 and "back in time" in back["message"]
        assert exchange(ws, append) is None
        assert exchange(ws, append)["status"] == 429
    assert http.get(f"/v1/streams/{sid}").status_code == 200


def test_an_append_is_capped_at_15_mib_of_base64(server, sid, clock):
    with websockets_sync.connect(server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime",
                                 max_size=None) as ws:
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (15 * 2**20 + 4)}))
        error = strict_json(ws.recv(timeout=60))
        assert error["type"] == "error" and error["status"] == 413 and "15 MiB" in error["message"]
        ws.send(json.dumps({"type": "session.update", "session": {}}))
        assert strict_json(ws.recv(timeout=60))["type"] == "session.updated"  # the socket goes on


@pytest.mark.parametrize("session, field", [
    ({"audio": {"input": {"format": {"type": "audio/pcmu"}}}}, "session.audio.input.format"),
    ({"input_audio_format": "g711_ulaw"}, "session.input_audio_format"),
    ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}, "session.audio.input.format"),
    ({"output_audio_format": "g711_alaw"}, "session.output_audio_format"),
    ({"voice": "robot"}, "session.voice"),
    ({"audio": {"output": {"voice": "robot"}}}, "session.audio.output.voice"),
    ({"colour": "red"}, "session.colour"),
    ({"audio": {"input": {"loudness": 3}}}, "session.audio.input.loudness"),
    ({"turn_detection": None, "voice": "robot"}, "session.voice"),
])
def test_session_update_refuses_what_it_does_not_take_and_changes_nothing(server, sid, session, field):
    with websockets_sync.connect(server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime") as ws:
        ws.send(json.dumps({"type": "session.update", "session": session}))
        error = strict_json(ws.recv(timeout=60))
        assert error["type"] == "error" and error["status"] == 400 and error["message"].startswith(field)
        ws.send(json.dumps({"type": "session.update", "session": {}}))
        updated = strict_json(ws.recv(timeout=60))["session"]
        assert updated["turn_detection"]["type"] == "server_vad" and updated["voice"] == "server"


def test_session_update_takes_both_openai_shapes(server, sid):
    with websockets_sync.connect(server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime") as ws:
        ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "instructions": "be brief", "output_modalities": ["text"],
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None},
                      "output": {"format": {"type": "audio/pcm"}, "voice": "marin"}}}}))
        updated = strict_json(ws.recv(timeout=60))["session"]
        assert updated["turn_detection"] is None and updated["voice"] == "marin"
        assert updated["output_modalities"] == ["text"]
        ws.send(json.dumps({"type": "session.update", "session": {
            "input_audio_format": "pcm16", "voice": "alloy", "turn_detection": {"type": "server_vad",
                                                                                "silence_duration_ms": 700}}}))
        updated = strict_json(ws.recv(timeout=60))["session"]
        assert updated["turn_detection"] == {"type": "server_vad", "silence_duration_ms": 700}
        assert updated["voice"] == "alloy"


def test_push_to_talk_appends_are_held_to_a_budget_too(server, sid, clock):
    with websockets_sync.connect(server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime") as ws:
        ws.send(json.dumps({"type": "session.update", "session": {"turn_detection": None}}))
        assert strict_json(ws.recv(timeout=60))["session"]["turn_detection"] is None
        second = base64.b64encode(b"\x00\x00" * 24000).decode()
        for _ in range(11):
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": second}))
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": second}))
        error = strict_json(ws.recv(timeout=60))  # appends are not acknowledged: the first reply is the refusal
        assert error["type"] == "error" and error["status"] == 429 and "2x real time" in error["message"]
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        assert strict_json(ws.recv(timeout=60))["type"] == "input_audio_buffer.cleared"
