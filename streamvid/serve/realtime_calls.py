"""`POST /v1/realtime/calls`: OpenAI's Realtime API over WebRTC (aiortc), as a browser or the official SDK's
`client.realtime.calls.create(sdp=..., session=...)` calls it.

    POST /v1/realtime/calls   body: the SDP offer (Content-Type application/sdp), or multipart/form-data with an
                              `sdp` part and a `session` part (JSON: the GA session, realtime_session.py)
      -> 201, the SDP answer (application/sdp), Location: /v1/realtime/calls/rtc_...
    POST /v1/realtime/calls/{call_id}/hangup  -> 200 (the server's key only)

A call is a GA realtime session (realtime_conversation.py) on a live stream, as the WebSocket's is: it opens a
"push" stream (closed when the call ends), or attaches to the stream its session's `streamvid.stream_id` names (one
call per stream at a time: a second gets 409). What it carries:
- the data channel the peer names `oai-events`: the same client and server events as the WebSocket, plus the
  WebRTC-only output_audio_buffer.started / .stopped / .cleared and the client's output_audio_buffer.clear;
- the peer's video track: the stream's frames, the newest one taken at the stream's fps (an audio-only call is a
  stream without frames);
- the peer's audio track: the stream's sound, heard by server VAD (turn detection on, the default: each utterance is
  a question, as OpenAI's turns are), or the question being spoken (turn detection null: commit by hand);
- an outbound audio track (when the offer has audio): the spoken answers, alerts and remarks, in real time (with
  audio output; their words still come as transcript events on the channel).
Hanging up (the hangup route, the peer closing, or its connection failing) ends the stream's live input; a peer that
has not connected within ICE_TIMEOUT_S is hung up on. ICE uses host candidates only, unless the server was started
with `--ice-server URL` (STUN/TURN: stun:host:port, turn:user:password@host:port).

With `--api-key`, the server's key or a client secret (client_secrets.py: one call or socket each) is the Bearer.
Refused with a one-line 400 in OpenAI's error shape: a body that is not an SDP offer, an offer without any media or
data channel, one whose media has no codec in common (VP8/H.264 video, Opus/PCMU/PCMA audio), a session part the
socket's session.update would refuse (naming the parameter); 401 without a key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets as tokens
import time

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response

from streamvid.errors import HubError
from streamvid.serve.client_secrets import ClientSecrets, authorize
from streamvid.serve.errors import ServeError, wire_error
from streamvid.serve.realtime_conversation import RealtimeSession, release
from streamvid.serve.realtime_session import ParamError, SessionConfig
from streamvid.serve.web import GetBackend, check_key
from streamvid.serve.webrtc_media import ChannelSocket, SpokenTrack, hear, sample_frames

log = logging.getLogger(__name__)

ICE_TIMEOUT_S = 30.0  # a peer that has not connected by then is hung up on
MAX_SDP_CHARS = 64 * 1024
MAX_CALLS = 64  # calls at once on one server
EVENTS_LABEL = "oai-events"
ERROR_EVERY_S = 10.0  # at most one error event this often for the peer's sound refused (a full push-to-talk buffer)


class Call:
    """One peer connection and the realtime session it carries."""

    def __init__(self, calls: Calls, backend, sid: str, owned: bool, items, fps: float | None):
        from aiortc import RTCConfiguration, RTCPeerConnection

        self.id = f"rtc_{tokens.token_hex(12)}"
        self.calls, self.backend, self.sid, self.owned, self.items = calls, backend, sid, owned, items
        self.fps = fps or 1.0
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[ice_server(u) for u in backend.options.ice_servers]))
        self.socket = ChannelSocket()
        self.socket.on_close = self.hang_up_async
        self.voice = SpokenTrack(self._voice_event)
        self.session = RealtimeSession(self.socket, backend, sid, items, fps, voice_track=self.voice)
        self.media: list[asyncio.Task] = []
        self.ended = False
        self.frames_pushed = 0
        self._last_error = 0.0
        self.pc.on("track", self._track)
        self.pc.on("datachannel", self._channel)
        self.pc.on("connectionstatechange", self._state)

    # ---- the offer ----------------------------------------------------------------------------------------
    async def answer(self, offer: str) -> str:
        from aiortc import RTCSessionDescription
        from aiortc.exceptions import OperationError

        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        except OperationError:  # (aiortc: no codec of a media section in common)
            raise ParamError("the SDP offer has media with no codec this server takes (video VP8 or H.264, audio "
                             "Opus, PCMU or PCMA)", "sdp", "unsupported_codec") from None
        except Exception as e:  # noqa: BLE001 - aiortc's parser raises whatever it meets (AssertionError too)
            detail = " ".join(str(e).split())[:200] or type(e).__name__
            raise ParamError(f"the SDP offer was refused: {detail}", "sdp", "invalid_sdp") from None
        kinds = [t.kind for t in self.pc.getTransceivers()]
        if "audio" in kinds:
            self.pc.addTrack(self.voice)
        answer = await self.pc.createAnswer()
        if answer is None:
            raise ParamError("the SDP offer has no media and no data channel", "sdp", "invalid_sdp")
        await self.pc.setLocalDescription(answer)
        sdp = self.pc.localDescription.sdp
        if not _has_usable_section(sdp):
            raise ParamError("the SDP offer has no media this server can take (video VP8 or H.264, audio Opus, "
                             "PCMU or PCMA) and no data channel", "sdp", "unsupported_codec")
        return sdp

    def start(self, session: dict | None) -> None:
        self.runner = asyncio.ensure_future(self._run(session))
        self.watchdog = asyncio.ensure_future(self._ice_deadline())

    async def _run(self, session: dict | None) -> None:
        try:
            await self.session.run(session)
        finally:
            await self._close()

    async def _ice_deadline(self) -> None:
        timeout_s = self.calls.ice_timeout_s or ICE_TIMEOUT_S
        await asyncio.sleep(timeout_s)
        if self.pc.connectionState != "connected":
            log.info("call %s: the peer did not connect within %g s", self.id, timeout_s)
            self.hang_up()

    # ---- the peer -----------------------------------------------------------------------------------------
    def _channel(self, channel) -> None:
        if channel.label == EVENTS_LABEL and self.socket.channel is None:
            self.socket.attach(channel)

    def _track(self, track) -> None:
        if track.kind == "video":
            self.media.append(asyncio.ensure_future(sample_frames(track, self._push_frame, self.fps)))
        elif track.kind == "audio":
            self.media.append(asyncio.ensure_future(hear(track, self._take_sound)))

    def _state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self.hang_up()

    async def _push_frame(self, rgb) -> None:
        try:
            await self.backend.push(self.sid, rgb, None, None)
            self.frames_pushed += 1
        except (ServeError, HubError) as e:
            self._report(e)

    async def _take_sound(self, pcm: bytes) -> None:
        await self.session.ready.wait()
        try:
            await self.session.take_pcm(pcm)
        except (ParamError, ServeError, HubError) as e:
            self._report(e)

    def _report(self, e: Exception) -> None:
        now = time.monotonic()
        if now - self._last_error >= ERROR_EVERY_S and self.session.ready.is_set():
            self._last_error = now
            self.session.out.error(e)

    def _voice_event(self, event: dict) -> None:
        if self.session.ready.is_set():
            self.session.out.put(event)

    # ---- the end ------------------------------------------------------------------------------------------
    def hang_up(self) -> None:
        """End the call (any number of times): the session's loop ends, then everything is closed."""
        if not self.ended:
            self.ended = True
            self.socket.hang_up()

    async def hang_up_async(self) -> None:
        self.hang_up()

    async def _close(self) -> None:
        self.ended = True
        self.watchdog.cancel()
        for task in self.media:
            task.cancel()
        self.voice.stop()
        with contextlib.suppress(Exception):
            await self.pc.close()
        for task in self.media:
            with contextlib.suppress(BaseException):
                await task
        await release(self.backend, self.items, self.sid if self.owned else None)
        self.calls.forget(self)


class Calls:
    """The calls of one server: by id, and which stream each holds."""

    def __init__(self, ice_timeout_s: float | None = None, max_calls: int = MAX_CALLS):
        self.ice_timeout_s, self.max_calls = ice_timeout_s, max_calls
        self.live: dict[str, Call] = {}
        self.streams: dict[str, str] = {}  # stream id -> call id

    def forget(self, call: Call) -> None:
        self.live.pop(call.id, None)
        if self.streams.get(call.sid) == call.id:
            del self.streams[call.sid]

    async def hang_up_all(self) -> None:
        calls = list(self.live.values())
        for call in calls:
            call.hang_up()
        for call in calls:
            with contextlib.suppress(BaseException):
                await call.runner

    def __len__(self) -> int:
        return len(self.live)


def add_routes(app: FastAPI, get_backend: GetBackend, secrets: ClientSecrets, calls: Calls) -> None:
    async def server_key(request: Request) -> None:
        check_key(request.headers.get("authorization"), get_backend().options)

    @app.post("/v1/realtime/calls", status_code=201)
    async def create_call(request: Request) -> Response:
        backend = get_backend()
        granted = authorize(request.headers.get("authorization"), request.scope, backend.options, secrets)
        try:
            offer, asked = await _read_offer(request)
            session = _merge(granted or {}, asked or {})
            ext = session.get("streamvid") if isinstance(session.get("streamvid"), dict) else {}
            stream_id = ext.get("stream_id") if isinstance(ext.get("stream_id"), str) else None
            SessionConfig(backend.options.model_id, stream_id, None, True).update(session)  # refused now, not later
        except ParamError as e:
            raise ServeError(e.message, 400, "invalid_request_error", e.code) from None
        if len(calls) >= calls.max_calls:
            raise ServeError(f"{calls.max_calls} calls are live on this server: hang one up first", 503,
                             "server_error", "too_many_calls")
        sid, owned, items, call = ext.get("stream_id"), False, None, None
        try:
            if sid is not None and not isinstance(sid, str):
                raise ParamError("session.streamvid.stream_id must be a stream id", "session.streamvid.stream_id")
            if sid in calls.streams:
                raise ServeError(f"stream {sid} already has a live call ({calls.streams[sid]}): hang it up first",
                                 409, "invalid_request_error", "call_in_progress")
            if not sid:
                sid, owned = (await backend.open("push"))["id"], True
            items = backend.events(sid, deltas=True)
            await anext(items)  # subscribed (404 for an unknown stream)
            status = await backend.status(sid)
            call = Call(calls, backend, sid, owned, items, status.get("fps"))
            answer = await call.answer(offer)
        except (ParamError, ServeError, HubError) as e:
            await _abandon(backend, call, items, sid if owned else None)
            if isinstance(e, ParamError):
                raise ServeError(e.message, 400, "invalid_request_error", e.code) from None
            raise wire_error(e) from None
        except BaseException:
            await _abandon(backend, call, items, sid if owned else None)
            raise
        calls.live[call.id] = call
        calls.streams[sid] = call.id
        call.start(session or None)
        return Response(answer, status_code=201, media_type="application/sdp",
                        headers={"Location": f"/v1/realtime/calls/{call.id}"})

    @app.post("/v1/realtime/calls/{call_id}/hangup", dependencies=[Depends(server_key)])
    async def hang_up(call_id: str) -> dict:
        call = calls.live.get(call_id)
        if call is None:
            raise ServeError(f"no live call {call_id[:40]!r}", 404, "invalid_request_error", "call_not_found")
        call.hang_up()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(call.runner), 10.0)
        return {}


async def _abandon(backend, call: Call | None, items, owned_sid: str | None) -> None:
    if call is not None:
        call.voice.stop()
        with contextlib.suppress(Exception):
            await call.pc.close()
    await release(backend, items, owned_sid)


async def _read_offer(request: Request) -> tuple[str, dict | None]:
    """(the SDP offer, the session JSON part or None) of the request."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    session = None
    if kind == "multipart/form-data":
        try:
            form = await request.form(max_files=2, max_fields=4, max_part_size=MAX_SDP_CHARS)
        except Exception:  # noqa: BLE001 - a malformed multipart body
            raise ParamError("the multipart body could not be read", None, "invalid_body") from None
        sdp, raw = await _part(form.get("sdp")), await _part(form.get("session"))
        if raw:
            try:
                session = json.loads(raw)
            except ValueError:
                raise ParamError("the session part is not valid JSON", "session", "invalid_json") from None
            if not isinstance(session, dict):
                raise ParamError("the session part must be a JSON object", "session", "invalid_type")
    elif kind == "application/sdp":
        sdp = (await request.body()).decode("utf-8", "replace")
    else:
        raise ParamError("send the SDP offer as application/sdp, or as multipart/form-data with an sdp part (and "
                         "a session part)", None, "unsupported_content_type")
    if not sdp or not sdp.lstrip().startswith("v=0"):
        raise ParamError("the body is not an SDP offer (it starts with v=0)", "sdp", "invalid_sdp")
    if len(sdp) > MAX_SDP_CHARS:
        raise ParamError(f"the SDP offer is over {MAX_SDP_CHARS // 1024} KiB", "sdp", "invalid_sdp")
    if "\nm=" not in sdp.replace("\r\n", "\n"):
        raise ParamError("the SDP offer has no media and no data channel (no m= line)", "sdp", "invalid_sdp")
    return sdp, session


async def _part(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    data = await value.read(MAX_SDP_CHARS + 1)
    return data.decode("utf-8", "replace")


def _has_usable_section(sdp: str) -> bool:
    """Whether the answer accepts at least one m= section (a rejected one has port 0)."""
    return any(line.startswith("m=") and line.split()[1] != "0" for line in sdp.splitlines())


def _merge(base: dict, over: dict) -> dict:
    """`over` on top of `base`, objects merged key by key (a client secret's session, then the call's)."""
    merged = dict(base)
    for key, value in over.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) \
            else value
    return merged


def ice_server(url: str):
    """An `--ice-server` URL as aiortc's RTCIceServer: stun:HOST[:PORT], or turn:[USER:PASSWORD@]HOST[:PORT]
    (turns: too, and ?transport=udp|tcp); ValueError, one line, for anything else."""
    from aiortc import RTCIceServer

    scheme, _, rest = url.partition(":")
    if scheme not in ("stun", "turn", "turns") or not rest or rest.startswith("//"):
        raise ValueError(f"--ice-server {url[:80]!r}: use stun:HOST[:PORT] or turn:USER:PASSWORD@HOST[:PORT]")
    if "@" not in rest:
        return RTCIceServer(url)
    who, _, where = rest.rpartition("@")
    user, _, password = who.partition(":")
    if scheme == "stun" or not user or not password or not where:
        raise ValueError(f"--ice-server {scheme}:...@{where[:60]}: credentials are for turn: URLs, as USER:PASSWORD@")
    return RTCIceServer(f"{scheme}:{where}", username=user, credential=password)
