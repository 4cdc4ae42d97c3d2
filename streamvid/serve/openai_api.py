"""OpenAI-compatible routes: `GET /v1/models` and `POST /v1/chat/completions` about a stream.

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="KEY")
    reply = client.chat.completions.create(model="streamvid-tiny", extra_body={"stream_id": sid},
                                           messages=[{"role": "user", "content": "What colour is the circle?"}])
    reply.choices[0].message.content, reply.model_extra["streamvid"]     # the answer; t_s, evidence_t_s, ...

The last user message is a question about stream `stream_id` at its current time; earlier user/assistant messages
are the dialogue it is answered with (pairs, in order; system messages are ignored). The last message may be spoken:
one `{"type": "input_audio", "input_audio": {"data": "<base64 WAV>", "format": "wav"}}` part, whose words (the
server's recogniser, a leading wake word left out) are the question. The answer comes as a
`chat.completion` plus `"streamvid": {"stream_id", "question_id", "t_s", "evidence_t_s", "retrieved_blocks",
"ttft_ms"}`, or with `"stream": true` as `chat.completion.chunk` server-sent events ending with `data: [DONE]`
(the last chunk carries the finish reason and the "streamvid" object; `stream_options.include_usage` adds the
usage chunk). A "tell me when ..." question registers a trigger: the reply acknowledges it and `"streamvid"` has its
`trigger_id`; alerts come on the stream's events. A spoken question's answer has `"streamvid": {"transcript"}`: the
words heard, the question asked. Decoding is the engine's (greedy, up to its max_new_tokens): `max_tokens` /
`max_completion_tokens` and `stop` cut the reply, parameters that would need sampling are refused by name (a
one-line 400), and `usage` counts what the model read and wrote (chat_params.py says which parameter does what).
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict

from streamvid.errors import HubError, Refused
from streamvid.serve.chat_params import Reply, chat_limits
from streamvid.serve.errors import ServeError, wire_error
from streamvid.serve.web import GetBackend, dumps

STARTED = int(time.time())
ROLES = ("system", "developer", "user", "assistant")


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # max_tokens, stop, temperature, ...: chat_params.py
    model: str
    messages: list[dict]
    stream: bool = False
    stream_id: str | None = None
    stream_options: dict | None = None


def add_routes(app: FastAPI, get_backend: GetBackend, auth: list) -> None:
    @app.get("/v1/models", dependencies=auth)
    async def models() -> dict:
        model = get_backend().options.model_id
        return {"object": "list", "data": [{"id": model, "object": "model", "created": STARTED,
                                            "owned_by": "streamvid"}]}

    @app.post("/v1/chat/completions", dependencies=auth)
    async def chat_completions(body: ChatRequest):
        backend = get_backend()
        options = backend.options
        if body.model != options.model_id:
            raise ServeError(f"model {body.model[:100]!r} is not served here; this server serves "
                           f"{options.model_id!r} (GET /v1/models)", 404, "not_found_error", "model_not_found")
        if not body.stream_id:
            raise Refused('"stream_id" is required: the stream the question is about (openai client: '
                             'extra_body={"stream_id": ...})')
        reply = Reply(chat_limits(body.model_extra or {}))
        question, dialogue = conversation(body.messages)
        heard = None
        if isinstance(question, SpokenPart):  # an input_audio part: the words heard in it are the question
            question = heard = await backend.spoken_question(body.stream_id, question.data, question.format)
        items = backend.ask(body.stream_id, question, dialogue)
        try:
            asked = await anext(items)  # queued: an unknown stream, a full queue ... are answered before streaming
        except BaseException:
            await items.aclose()
            raise
        cid = f"chatcmpl-{secrets.token_hex(12)}"
        created = int(time.time())
        head = {"id": cid, "created": created, "model": options.model_id}
        if not body.stream:
            try:
                answer = None
                async for item in items:
                    if item["type"] == "answer.delta":
                        reply.feed(item["text"])
                    elif item["type"] == "answer":
                        answer = item
                        reply.finish(item)
            finally:
                await items.aclose()
            return {**head, "object": "chat.completion", "choices": [{
                "index": 0, "message": {"role": "assistant", "content": reply.sent}, "logprobs": None,
                "finish_reason": reply.finish_reason(answer, options)}],
                "usage": reply.usage(answer), "streamvid": extra(answer, asked, heard)}
        include_usage = bool((body.stream_options or {}).get("include_usage"))

        def chunk(delta: dict, finish: str | None = None, **more) -> str:
            obj = {**head, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **more}
            return f"data: {dumps(obj)}\n\n"

        async def events():
            # the content streamed is the answer's text (stripped: trailing blanks wait for more text), cut where
            # the request's max_tokens or stop say
            try:
                yield chunk({"role": "assistant", "content": ""})
                async for item in items:
                    if item["type"] == "answer.delta":
                        if more := reply.feed(item["text"]):
                            yield chunk({"content": more})
                    elif item["type"] == "answer":
                        if more := reply.finish(item):
                            yield chunk({"content": more})
                        yield chunk({}, reply.finish_reason(item, options), streamvid=extra(item, asked, heard))
                        if include_usage:
                            last = {**head, "object": "chat.completion.chunk", "choices": [],
                                    "usage": reply.usage(item)}
                            yield f"data: {dumps(last)}\n\n"
            except (ServeError, HubError) as e:
                yield f"data: {dumps(wire_error(e).body())}\n\n"
            finally:
                await items.aclose()
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def conversation(messages: list[dict]) -> tuple[str | SpokenPart, list[tuple[str, str]]]:
    """(the question: the last message, a user's, its text or its input_audio part; the earlier user/assistant
    turns as (question, answer) pairs)."""
    if not messages:
        raise Refused("messages is empty: the last message must be the user's question")
    turns: list[tuple[str, str]] = []
    pending: str | None = None
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ROLES:
            raise Refused(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {str(role)[:40]!r}")
        text = content_text(m.get("content"), i)
        if isinstance(text, SpokenPart) and i != len(messages) - 1:
            raise Refused(f"messages[{i}]: only the last message may be spoken (input_audio); earlier turns are text")
        if role == "user":
            if pending is not None:
                turns.append((pending, ""))
            pending = text
        elif role == "assistant" and pending is not None:
            turns.append((pending, text))
            pending = None
    if messages[-1].get("role") != "user" or pending is None:
        raise Refused("the last message must be the user's question")
    return pending, turns


@dataclass(frozen=True)
class SpokenPart:
    """A question asked by voice: an OpenAI `input_audio` content part (base64 `data`, its `format`)."""

    data: bytes
    format: object


def content_text(content, i: int) -> str | SpokenPart:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "input_audio" and len(content) == 1:
                return spoken_part(part.get("input_audio"), i)
            if kind != "text" or not isinstance(part.get("text"), str):
                raise Refused(f"messages[{i}].content: only text parts, or one input_audio part, are accepted, got "
                              f"{str(kind)[:40]!r}; send frames to POST /v1/streams/{{id}}/frames")
            parts.append(part["text"])
        return "\n".join(parts)
    if content is None:
        return ""
    raise Refused(f"messages[{i}].content must be text or a list of text parts")


def spoken_part(audio, i: int) -> SpokenPart:
    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
        raise Refused(f'messages[{i}].content: input_audio needs {{"data": base64 WAV, "format": "wav"}}')
    try:
        return SpokenPart(base64.b64decode(audio["data"], validate=True), audio.get("format"))
    except (binascii.Error, ValueError):
        raise Refused(f"messages[{i}].content: input_audio data is not valid base64") from None


def extra(answer: dict, asked: dict, heard: str | None = None) -> dict:
    """The "streamvid" object of a reply: the answer's times and evidence; `transcript`, the words heard, when the
    question was spoken."""
    out = {"stream_id": asked["stream_id"], "question_id": answer["id"]}
    out |= {k: answer.get(k) for k in ("t_s", "evidence_t_s", "retrieved_blocks", "ttft_ms")}
    for key in ("trigger_id", "evidence_frame_url"):  # (a watch's acknowledgement; a stream keeping alert media)
        if key in answer:
            out[key] = answer[key]
    if heard is not None:
        out["transcript"] = heard
    return out
