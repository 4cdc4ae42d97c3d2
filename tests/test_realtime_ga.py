"""`GET /v1/realtime` driven by the official `openai` SDK's realtime client against `streamvid serve` (the bundled
model on uvicorn): every server event is checked against the SDK's own models (`RealtimeServerEvent`); answers are
compared with the engine's own answer on the same frames; the spoken question is espeak-ng's (skipped without
it, except under STREAMVID_REQUIRE_SPEECH=1) and its transcript checked against the words spoken; client secrets
are OpenAI's shape, good for one realtime session and nothing else."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import re
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
from serve_helpers import engine_answer, frames_taken, png, running, spoken, wait_until

from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.eval.wer import words
from streamvid.media.file_source import FileSource
from streamvid.serve import ServeOptions, build_app
from streamvid.serve.client_secrets import ClientSecrets

openai = pytest.importorskip("openai")
pytest.importorskip("websockets")
pydantic = pytest.importorskip("pydantic")
from openai.types.realtime.client_secret_create_response import ClientSecretCreateResponse
from openai.types.realtime.realtime_server_event import RealtimeServerEvent
from websockets.exceptions import InvalidStatus

KEY = "k" * 24
MODEL = "streamvid-tiny"
BUNDLED = EngineConfig.from_settings(frame_px=112, max_new_tokens=12)
QUESTION = "How many shapes are on screen?"
SERVER_EVENT = pydantic.TypeAdapter(RealtimeServerEvent)
WAIT_S = 120.0


@pytest.fixture(scope="module")
def bundled():
    engine = Engine(BUNDLED)
    app = build_app(engine, ServeOptions(api_key=KEY, model_id=MODEL, max_new_tokens=12, max_body_mb=1.0,
                                         max_frame_pixels=1024 * 1024))
    try:
        with running(app) as url:
            yield url, engine
    finally:
        engine.close()


@pytest.fixture(scope="module")
def images():
    from streamvid.assets import demo_clip

    source = FileSource(demo_clip("shapes_7"), fps=2.0)
    return [f.image for f in iter(source.read, None) if f.t_s <= 9.5]


def client(url: str, key: str = KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=key, base_url=f"{url}/v1", websocket_base_url=url.replace("http", "ws") + "/v1",
                              max_retries=0)


class Events:
    """The events of one connection, each validated by the SDK's own models as it arrives (but streamvid's own,
    kept as dicts, for a session that asked for them: `streamvid`)."""

    def __init__(self, conn, streamvid: bool = False):
        self.conn, self.seen, self.streamvid = conn, [], streamvid

    async def next(self) -> object:
        while True:
            raw = await asyncio.wait_for(self.conn.recv_bytes(), WAIT_S)
            if not (self.streamvid and json.loads(raw)["type"].startswith("streamvid.")):
                break
            self.seen.append(json.loads(raw))
        event = SERVER_EVENT.validate_json(raw)  # a type the SDK knows, with every required field
        assert event.event_id and event.type == self.conn.parse_event(raw).type
        self.seen.append(event)
        return event

    async def until(self, kind: str, pred=lambda e: True) -> list:
        got = []
        while True:
            event = await self.next()
            got.append(event)
            if event.type == kind and pred(event):
                return got


def data_url(image: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(png(image)).decode()


async def push_items(conn, events: Events, http: httpx.Client, sid: str, images, t0_s: float = 0.0) -> None:
    """Each image as a user message with an input_image part at stream time t0 + i/2, each taken by the engine
    before the next (a push stream keeps only its newest frame)."""
    taken0 = frames_taken(http, sid)
    for i, image in enumerate(images):
        await conn.send({"type": "conversation.item.create", "streamvid": {"t_s": t0_s + i / 2},
                         "item": {"type": "message", "role": "user",
                                  "content": [{"type": "input_image", "image_url": data_url(image)}]}})
        done = (await events.until("conversation.item.done"))[-1]
        assert done.item.content[0].type == "input_image"
        await asyncio.to_thread(wait_until, lambda n=i + 1: frames_taken(http, sid) >= taken0 + n, WAIT_S,
                                "the frame to reach the engine")
    blocks = (taken0 + len(images)) // 2
    await asyncio.to_thread(wait_until, lambda: http.get(f"/v1/streams/{sid}").json()["blocks_encoded"] >= blocks,
                            WAIT_S, "the last chunk in the window")


def http_client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=60.0, headers={"Authorization": f"Bearer {KEY}"})


@pytest.fixture(scope="module")
def http(bundled):
    """The tests' own keyed reads of the server (stream status, watches, alerts)."""
    with http_client(bundled[0]) as c:
        yield c


def test_session_lifecycle_update_and_errors_the_sdk_parses(bundled, http):
    url, _ = bundled

    async def main():
        async with client(url).realtime.connect(model=MODEL) as conn:
            events = Events(conn)
            created = await events.next()
            assert created.type == "session.created" and created.session.type == "realtime"
            sid = created.session.model_extra["streamvid"]["stream_id"]
            assert created.session.model == MODEL and created.session.output_modalities == ["audio"]
            await conn.session.update(session={
                "type": "realtime", "output_modalities": ["text"], "instructions": "Be brief.",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None,
                                    "transcription": {"model": "whisper-1"}},
                          "output": {"voice": "marin", "format": {"type": "audio/pcm", "rate": 24000}}}})
            s = (await events.until("session.updated"))[-1].session
            assert (s.output_modalities, s.instructions, s.audio.input.turn_detection, s.audio.output.voice) == \
                (["text"], "Be brief.", None, "marin")
            await conn.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": {
                "type": "semantic_vad", "eagerness": "low"}}}})
            s = (await events.until("session.updated"))[-1].session
            assert s.audio.input.turn_detection.type == "server_vad" and s.output_modalities == ["text"]
            bad = [({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"format": {
                        "type": "audio/pcmu"}}}}}, "session.audio.input.format"),
                   ({"type": "session.update", "session": {"type": "transcription"}}, "session.type"),
                   ({"type": "session.update", "session": {"type": "realtime", "tools": [
                       {"type": "function", "name": "f"}]}}, "session.tools"),
                   ({"type": "input_audio_buffer.append", "audio": "not base64!"}, "audio"),
                   ({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                       {"type": "input_image", "image_url": "data:image/png;base64,%%%"}]}},
                    "item.content[0].image_url"),
                   ({"type": "response.cancel"}, None)]
            for event, param in bad:
                await conn.send(event)
                error = (await events.until("error"))[-1].error
                assert error.param == param and error.message and "\n" not in error.message, error
            await conn.send_raw("{not json")
            assert "not valid JSON" in (await events.until("error"))[-1].error.message
            await conn.send_raw('{"type": "video.frame"}')
            assert (await events.until("error"))[-1].error.code == "invalid_event_type"
            await conn.send_raw('{"type": "input_audio_buffer.append", "audio": "' + "A" * (2 * 2**20) + '"}')
            assert (await events.until("error"))[-1].error.code == "event_too_large"
            huge = np.zeros((1100, 1000, 3), np.uint8)  # 1.1 M pixels, above --max-frame-pixels (1 M)
            await conn.send({"type": "conversation.item.create", "event_id": "evt_big", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_image", "image_url": data_url(huge)}]}})
            error = (await events.until("error"))[-1].error
            assert error.event_id == "evt_big" and "pixel" in error.message.lower()
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Is anything there?"}]})
            added = (await events.until("conversation.item.done"))[-1].item
            await conn.conversation.item.delete(item_id=added.id)
            assert (await events.until("conversation.item.deleted"))[-1].item_id == added.id
            await conn.response.create()
            assert (await events.until("error"))[-1].error.code == "no_user_message"  # (it was deleted)
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": QUESTION}]})
            await conn.response.create()
            unseen = await events.until("response.done")  # nothing was shown: answered so, without the model
        return sid, unseen

    sid, unseen = asyncio.run(main())
    fresh = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    said = http.post("/v1/chat/completions", json={"model": MODEL, "stream_id": fresh, "messages": [
        {"role": "user", "content": QUESTION}]}).json()["choices"][0]["message"]["content"]
    http.delete(f"/v1/streams/{fresh}")
    text = "".join(e.delta for e in unseen if e.type == "response.output_text.delta")
    assert text == said == unseen[-1].response.output[0].content[0].text and len(said) > 10
    assert unseen[-1].response.usage.output_tokens == 0
    # the stream the session opened closed with it:
    wait_until(lambda: http.get(f"/v1/streams/{sid}").status_code == 404, 30, "the session's stream to close")


def test_frames_as_input_image_items_and_a_question_answered_like_the_engine(bundled, http, images):
    """Frames as input_image items, a text question, response.create: the whole lifecycle with one response id and
    one item id, the text (joined deltas) the engine's own answer on the same frames, usage the tokens read and
    generated, metadata echoed; a flood of response.create is refused while the response is active; a
    cancelled response ends "cancelled" with nothing after it."""
    url, engine = bundled

    async def main():
        async with client(url).realtime.connect(model="gpt-realtime") as conn:
            events = Events(conn)
            sid = (await events.next()).session.model_extra["streamvid"]["stream_id"]
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await events.until("session.updated")
            await push_items(conn, events, http, sid, images)
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": QUESTION}]})
            await events.until("conversation.item.done")
            for _ in range(4):
                await conn.response.create(response={"metadata": {"ticket": "42"}})
            answered = await events.until("response.done")
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": QUESTION}]})
            await conn.response.create()
            await conn.response.cancel()
            cancelled = await events.until("response.done")
            await conn.response.cancel()
            after = await events.until("error")
            return answered, cancelled, after

    answered, cancelled, after = asyncio.run(main())
    expected = engine_answer(BUNDLED, engine.adapter, images, QUESTION)
    kinds = [e.type for e in answered]
    lifecycle = ["response.created", "response.output_item.added", "conversation.item.added",
                 "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                 "response.content_part.done", "response.output_item.done", "conversation.item.done",
                 "response.done"]
    assert [k for k in kinds if k in lifecycle] == sorted((k for k in kinds if k in lifecycle), key=lifecycle.index)
    assert kinds.count("response.created") == 1 and kinds.count("error") == 3
    assert {e.error.code for e in answered if e.type == "error"} <= {"conversation_already_has_active_response",
                                                                     "no_user_message"}
    done = answered[-1].response
    rid, item_id = done.id, done.output[0].id
    deltas = [e for e in answered if e.type == "response.output_text.delta"]
    assert all((e.response_id, e.item_id, e.output_index, e.content_index) == (rid, item_id, 0, 0) for e in deltas)
    text = "".join(e.delta for e in deltas)
    assert text.strip() == expected["text"] and next(e for e in answered if e.type == "response.output_text.done"
                                                     ).text == text
    assert done.status == "completed" and done.output[0].content[0].text == text and done.metadata == {"ticket": "42"}
    prompt = int(engine.adapter.token_ids(engine.adapter.prompt(QUESTION)).shape[-1])
    assert done.usage.output_tokens == expected["tokens"] == len(deltas) > 0
    assert done.usage.input_token_details.text_tokens == prompt
    assert done.usage.input_tokens == prompt + expected["context_tokens"] and expected["context_tokens"] > 0
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    c = cancelled[-1].response
    assert c.status == "cancelled" and c.status_details.reason == "client_cancelled"
    assert not [e for e in after if getattr(e, "response_id", None) == c.id]
    assert after[-1].error.code == "response_cancel_not_active"


def test_a_spoken_question_is_transcribed_and_answered_aloud(bundled, http, images, tmp_path):
    """Push to talk (turn_detection null): appended PCM16, committed: the transcription (the words spoken), then
    response.create: the answer spoken (audio deltas the length of real speech) with its transcript, which is the
    engine's answer to the transcribed question on the same frames; the same sound as an input_audio part of a
    user item is transcribed into the item."""
    url, engine = bundled
    pcm = spoken(tmp_path, "how many shapes are on screen", 24000).tobytes()

    async def main():
        async with client(url).realtime.connect(model=MODEL) as conn:
            events = Events(conn)
            sid = (await events.next()).session.model_extra["streamvid"]["stream_id"]
            await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"],
                                               "audio": {"input": {"turn_detection": None}}})
            await events.until("session.updated")
            await push_items(conn, events, http, sid, images)
            for i in range(0, len(pcm), 9600):
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + 9600]).decode())
            await conn.input_audio_buffer.commit()
            heard = await events.until("conversation.item.input_audio_transcription.completed")
            await conn.response.create()
            answered = await events.until("response.done")
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                {"type": "input_audio", "audio": base64.b64encode(pcm).decode()}]})
            item = (await events.until("conversation.item.done"))[-1].item
            return heard, answered, item

    heard, answered, item = asyncio.run(main())
    assert item.content[0].type == "input_audio" and {"many", "shapes", "screen"} <= set(
        words(item.content[0].transcript))
    committed = next(e for e in heard if e.type == "input_audio_buffer.committed")
    transcript = heard[-1]
    assert transcript.item_id == committed.item_id
    assert {"many", "shapes", "screen"} <= set(words(transcript.transcript))
    expected = engine_answer(BUNDLED, engine.adapter, images, transcript.transcript)
    done = answered[-1].response
    assert done.status == "completed" and done.output_modalities == ["audio"]
    said = "".join(e.delta for e in answered if e.type == "response.output_audio_transcript.delta")
    assert words(said) == words(expected["text"]) and done.output[0].content[0].transcript == said
    audio = b"".join(base64.b64decode(e.delta) for e in answered if e.type == "response.output_audio.delta")
    assert len(audio) > 2 * 24000 * 0.2  # more than 0.2 s of speech
    assert not [e for e in answered if e.type == "response.output_text.delta"]


def test_an_alert_is_a_server_initiated_response_with_its_details_as_metadata(bundled, http, images):
    """A watch that fires at once (thresholds 0, added over HTTP): a plain SDK session gets the alert as a response
    it never asked for, its text the alert's, its metadata the alert's trigger id, time and media URLs as
    strings; a session that asked for streamvid's events also gets it as streamvid.alert."""
    url, _ = bundled

    async def main():
        async with client(url).realtime.connect(model=MODEL) as conn:
            events = Events(conn)
            sid = (await events.next()).session.model_extra["streamvid"]["stream_id"]
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await events.until("session.updated")
            async with client(url).realtime.connect(model=MODEL, extra_query={"stream_id": sid}) as other:
                listener = Events(other, streamvid=True)
                assert (await listener.next()).session.model_extra["streamvid"]["stream_id"] == sid
                await other.session.update(session={"type": "realtime", "streamvid": {"events": True},
                                                    "output_modalities": ["text"]})
                await listener.until("session.updated")
                watch = http.post(f"/v1/streams/{sid}/watches",
                                  json={"condition": "a red circle", "fire": 0.0, "reset": 0.0}).json()
                await push_items(conn, events, http, sid, images[:4])
                got = await events.until("response.done", lambda e: e.response.metadata is not None)
                heard = await listener.until("response.done", lambda e: e.response.metadata is not None)
            alerts = http.get(f"/v1/streams/{sid}/alerts").json()["data"]
            return watch, got, heard, alerts, listener.seen

    watch, got, heard, alerts, seen = asyncio.run(main())
    done = got[-1].response
    created = next(e for e in got if e.type == "response.created")
    assert created.response.id == done.id and created.response.status == "in_progress"
    alert = next(a for a in alerts if a["alert_id"] == done.metadata["alert_id"])
    assert done.metadata["streamvid_kind"] == "alert" and done.metadata["trigger_id"] == watch["id"]
    assert float(done.metadata["t_s"]) == alert["t_s"] and done.metadata["condition"] == "a red circle"
    assert done.metadata["snapshot_url"].endswith(f"/alerts/{alert['alert_id']}/snapshot.jpg")
    text = "".join(e.delta for e in got if e.type == "response.output_text.delta" and e.response_id == done.id)
    assert text == alert["text"] == done.output[0].content[0].text and done.status == "completed"
    assert any(isinstance(e, dict) and e["type"] == "streamvid.alert" and e["trigger_id"] == watch["id"] for e in seen)
    assert heard[-1].response.metadata["alert_id"] == done.metadata["alert_id"]


def test_client_secrets_open_one_realtime_session_and_nothing_else(bundled):
    url, _ = bundled
    with httpx.Client(base_url=url, timeout=60.0) as anonymous:
        assert anonymous.post("/v1/realtime/client_secrets", json={}).status_code == 401
    sync = openai.OpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0)
    made = sync.realtime.client_secrets.create(expires_after={"anchor": "created_at", "seconds": 60},
                                               session={"type": "realtime", "instructions": "Count shapes.",
                                                        "output_modalities": ["text"]})
    assert isinstance(made, ClientSecretCreateResponse) and made.value.startswith("ek_")
    ClientSecretCreateResponse.model_validate(made.model_dump())
    assert made.session.instructions == "Count shapes." and made.expires_at == made.session.expires_at
    with pytest.raises(openai.BadRequestError, match="expires_after.seconds"):
        sync.realtime.client_secrets.create(expires_after={"anchor": "created_at", "seconds": 99999})
    with pytest.raises(openai.BadRequestError, match="session.type"):
        sync.realtime.client_secrets.create(session={"type": "transcription"})
    with httpx.Client(base_url=url, timeout=60.0, headers={"Authorization": f"Bearer {made.value}"}) as browser:
        assert browser.get("/v1/streams").status_code == 401  # a realtime secret on another route
        assert browser.post("/v1/realtime/client_secrets", json={}).status_code == 401

    async def main():
        async with client(url, made.value).realtime.connect(model=MODEL) as conn:
            created = await Events(conn).next()  # the secret's session, from the start
        with pytest.raises(InvalidStatus) as reused:
            async with client(url, made.value).realtime.connect(model=MODEL):
                pass
        with pytest.raises(InvalidStatus) as wrong:
            async with client(url, "ek_" + "x" * 40).realtime.connect(model=MODEL):
                pass
        with pytest.raises(InvalidStatus) as other_model:
            async with client(url).realtime.connect(model="llama-3"):
                pass
        return created, reused.value.response.status_code, wrong.value.response.status_code, \
            other_model.value.response.status_code

    created, reused, wrong, other_model = asyncio.run(main())
    assert created.type == "session.created"
    assert created.session.instructions == "Count shapes." and created.session.output_modalities == ["text"]
    assert (reused, wrong, other_model) == (401, 401, 404)


def test_a_client_secret_expires():
    now = [1000.0]
    secrets = ClientSecrets(clock=lambda: now[0])
    first, at = secrets.issue(10, {"instructions": "a"})
    second, _ = secrets.issue(10, {})
    assert at == 1010 and secrets.valid(first)
    now[0] = 1010.0
    assert not secrets.valid(first) and secrets.take(first) is None and secrets.take(second) is None
    third, _ = secrets.issue(10, {"instructions": "c"})
    assert secrets.take(third) == {"instructions": "c"} and secrets.take(third) is None  # one session each
    assert len(secrets) == 0


def test_server_vad_answers_each_utterance_by_itself(bundled, http, images, tmp_path):
    """Turn detection on (the default, create_response): sound appended to the stream is heard by its voice
    detector; the utterance comes as speech_started / speech_stopped, committed (the same item), its user item and
    transcription, and a response nobody created, whose text is the engine's answer to the words heard."""
    url, engine = bundled
    pcm = spoken(tmp_path, "how many shapes are on screen", 24000).tobytes()

    async def main():
        async with client(url).realtime.connect(model=MODEL) as conn:
            events = Events(conn)
            sid = (await events.next()).session.model_extra["streamvid"]["stream_id"]
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"], "audio": {
                "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}}})
            s = (await events.until("session.updated"))[-1].session
            assert s.audio.input.turn_detection.silence_duration_ms == 500
            await push_items(conn, events, http, sid, images)
            for i in range(0, len(pcm), 9600):
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + 9600]).decode())
            return await events.until("response.done")

    got = asyncio.run(main())
    kinds = [e.type for e in got]
    order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "input_audio_buffer.committed",
             "conversation.item.input_audio_transcription.completed", "response.created", "response.done"]
    assert [k for k in kinds if k in order] == order, kinds
    started, committed, heard = (next(e for e in got if e.type == k) for k in (
        "input_audio_buffer.speech_started", "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed"))
    assert started.item_id == committed.item_id == heard.item_id
    assert {"many", "shapes", "screen"} <= set(words(heard.transcript))
    expected = engine_answer(BUNDLED, engine.adapter, images, heard.transcript)
    done = got[-1].response
    text = "".join(e.delta for e in got if e.type == "response.output_text.delta")
    assert done.status == "completed" and text.strip() == expected["text"]


def test_the_docs_sdk_example_runs_as_written(bundled, images):
    """docs/api.md's realtime example, as written (its server address and key replaced): a completed response with
    its usage printed."""
    url, _ = bundled
    text = (Path(__file__).parents[1] / "docs" / "api.md").read_text()
    (block,) = re.findall(r"<!-- test: realtime-sdk -->\n```python\n(.*?)```", text, re.DOTALL)
    printed = io.StringIO()
    code = compile(block.replace("127.0.0.1:8000", url.removeprefix("http://")).replace('"KEY"', repr(KEY)),
                   "docs/api.md", "exec")
    with contextlib.redirect_stdout(printed):
        exec(code, {"frames": [png(image) for image in images[:8]]})  # noqa: S102 - the docs' example, as written
    last = printed.getvalue().splitlines()[-1]
    assert re.fullmatch(r"\d+ completed RealtimeResponseUsage\(.*input_tokens=[1-9]\d*.*output_tokens=[1-9].*", last), last


def test_sessions_that_come_and_go_leave_no_stream_or_thread_behind(bundled, http):
    """Ten sessions (some opened with client secrets, some spoken to badly, some left while a spoken answer is on
    its way) and a few refused upgrades: afterwards no stream is open and no stream or speaking thread is left."""
    url, _ = bundled

    def ours():
        return {t for t in threading.enumerate() if t.name.startswith(("streamvid-hub", "streamvid-ingest",
                                                                      "streamvid-realtime"))}

    before = ours()
    sync = openai.OpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0)

    async def main():
        for i in range(10):
            key = sync.realtime.client_secrets.create().value if i % 3 == 0 else KEY
            async with client(url, key).realtime.connect(model=MODEL) as conn:
                events = Events(conn)
                await events.next()
                await conn.send_raw("{" * (i + 1))
                await events.until("error")
                if i % 2:
                    await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"]})
                    await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                        {"type": "input_text", "text": QUESTION}]})
                    await conn.response.create()
                    await events.until("response.created")  # (gone before it is answered)
            if i in (0, 5):  # (a few: the front door throttles an address after 10 wrong keys a minute)
                with pytest.raises(InvalidStatus):
                    async with client(url, "wrong-key-" + "x" * 20).realtime.connect(model=MODEL):
                        pass

    asyncio.run(main())
    wait_until(lambda: http.get("/v1/streams").json()["data"] == [], 60, "every session's stream to close")
    wait_until(lambda: not ours() - before, 60, "the sessions' threads to end")


def test_a_response_cut_at_max_output_tokens_is_incomplete():
    """Response fed token pieces past its max_output_tokens (2): two deltas go out, response.done says
    "incomplete" for "max_output_tokens" with 2 output tokens, and every event parses in the SDK's models."""
    from streamvid.serve.realtime_events import Outbox
    from streamvid.serve.realtime_responses import Response

    class Socket:
        def __init__(self):
            self.sent = []

        async def send_text(self, text):
            self.sent.append(text)

    async def main():
        ws = Socket()
        out = Outbox(ws)
        done = asyncio.Event()
        r = Response(out, "q1", audio=False, voice=None, max_tokens=2, on_done=lambda _: done.set())
        r.start()
        for piece in ("Two", " red", " circles", "."):
            r.delta(piece)
        r.finish({"type": "answer", "id": "q1", "text": "Two red circles.", "tokens": 4, "prompt_tokens": 9,
                  "context_tokens": 120})
        await asyncio.wait_for(done.wait(), WAIT_S)
        await out.close()
        return [SERVER_EVENT.validate_json(text) for text in ws.sent]

    events = asyncio.run(main())
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == ["Two", " red"]
    done = events[-1].response
    assert (done.status, done.status_details.reason, done.output[0].content[0].text) == (
        "incomplete", "max_output_tokens", "Two red")
    assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.input_token_details.cached_tokens) == (
        129, 2, 120)


def test_with_questions_wake_word_only_an_addressed_utterance_is_answered(bundled, http, images, tmp_path):
    """session.streamvid.questions "wake_word": an utterance without the wake word is only heard (committed and
    transcribed, no response); the next, addressed with it, gets the one response, for its item."""
    url, _ = bundled
    plain = spoken(tmp_path, "the shapes are moving", 24000).tobytes()
    asked = spoken(tmp_path, "assistant, how many shapes are there", 24000).tobytes()

    async def main():
        async with client(url).realtime.connect(model=MODEL) as conn:
            events = Events(conn)
            sid = (await events.next()).session.model_extra["streamvid"]["stream_id"]
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"],
                                               "streamvid": {"questions": "wake_word"}})
            assert (await events.until("session.updated"))[-1].session.model_extra["streamvid"]["questions"] == \
                "wake_word"
            await push_items(conn, events, http, sid, images[:4])
            for pcm in (plain, asked):
                for i in range(0, len(pcm), 9600):
                    await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + 9600]).decode())
            return await events.until("response.done")

    got = asyncio.run(main())
    heard = [e for e in got if e.type == "conversation.item.input_audio_transcription.completed"]
    created = [i for i, e in enumerate(got) if e.type == "response.created"]
    assert len(heard) == 2 and "moving" in words(heard[0].transcript) and "shapes" in words(heard[1].transcript)
    assert len(created) == 1 and got.index(heard[1]) < created[0]
