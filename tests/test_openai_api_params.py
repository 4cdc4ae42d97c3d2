"""`POST /v1/chat/completions` parity (openai_api.py, chat_params.py), through the official `openai` client against a
real server on loopback over the tiny random checkpoint: `usage` counts what the model read (checked against the
tokenizer's own count of the text asked and the stream's window) and wrote; `max_tokens` / `max_completion_tokens`
and `stop` cut the reply where the engine's own token pieces on the same frames say; sampling parameters this
greedy server cannot honour are refused by name (one line), the ones meaning greedy decoding are accepted; a spoken
question's reply says the words heard."""

from __future__ import annotations

import base64
import io
import json
import threading
import wave

import httpx
import pytest
from transformers import AutoTokenizer

from conftest import random_frames
from serve_helpers import push_frames, running, spoken, strict_json, wait_until
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.eval.wer import words
from streamvid.serve import ServeOptions, build_app
from streamvid.types import Frame

openai = pytest.importorskip("openai")

MODEL_ID = "tiny-qwen"
LIMIT = 8  # the server's max_new_tokens: the random checkpoint never stops before it
QUESTION = "What do you see?"


@pytest.fixture(scope="module")
def tiny_config(tiny_model_dir) -> EngineConfig:
    return EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=LIMIT)


@pytest.fixture(scope="module")
def server(tiny_config, adapter):
    engine = Engine(tiny_config, adapter)
    try:
        with running(build_app(engine, ServeOptions(model_id=MODEL_ID, max_new_tokens=LIMIT,
                                                    max_body_mb=4.0))) as url:
            yield url
    finally:
        engine.close()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server, timeout=120.0) as client:
        yield client


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120.0)


@pytest.fixture(scope="module")
def watched(http, tiny_config, adapter):
    """A push stream with six frames in its window, and the engine's own token pieces answering QUESTION on the
    same frames (a StreamingAssistant on this thread: the reference the replies are cut from)."""
    images = random_frames(6, seed=11)
    sid = http.post("/v1/streams", json={"source": "push", "fps": 2.0}).json()["id"]
    push_frames(http, sid, images)
    sa = StreamingAssistant(tiny_config, adapter=adapter)
    try:
        frames = [Frame(image, i / 2.0, i) for i, image in enumerate(images)]
        sa.feed(frames)
        qid = sa.ask(QUESTION, t_s=frames[-1].t_s)
        sa.engine.run_until_idle()
        outputs = [o for o in sa.outputs(timeout_s=0.0) if o.id == qid]
    finally:
        sa.stop()
    pieces = [o.text for o in outputs if o.kind == "token"]  # (the pieces with text: a token may decode to "")
    answer = next(o for o in outputs if o.kind == "answer").to_json()
    assert answer["tokens"] == LIMIT and len(pieces) > 3, "precondition: the random checkpoint runs to the limit"
    assert "".join(pieces).strip() == answer["text"]
    yield sid, pieces, answer
    http.delete(f"/v1/streams/{sid}")


def ask(client, sid: str, **params):
    return client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": sid},
                                          messages=[{"role": "user", "content": QUESTION}], **params)


def streamed(client, sid: str, **params) -> tuple[str, str, list]:
    """(the content, the finish reason, the chunks) of a streamed reply with its usage chunk."""
    chunks = list(ask(client, sid, stream=True, stream_options={"include_usage": True}, **params))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and chunks[-1].choices == [] and chunks[-1].usage is not None
    return content, finish[0], chunks


def test_usage_counts_the_context_and_prompt_read_and_the_tokens_written(client, http, watched, tiny_model_dir):
    sid, pieces, answer = watched
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    window = http.get(f"/v1/streams/{sid}").json()["window_tokens"]
    assert window > 0
    reply = ask(client, sid)
    u = reply.usage
    assert u.completion_tokens == LIMIT and u.total_tokens == u.prompt_tokens + u.completion_tokens
    cached = u.prompt_tokens_details.cached_tokens
    assert cached >= window  # the frames encoded are read from the cache (plus its attention sinks)
    assert u.prompt_tokens - cached >= count(QUESTION) + 1  # the question, in the chat template
    # the same question with a dialogue before it: the prompt read grows by at least the dialogue's own tokens
    history = [{"role": "user", "content": "Is there a red star in the corner?"},
               {"role": "assistant", "content": "No red star is visible."}, {"role": "user", "content": QUESTION}]
    longer = client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": sid}, messages=history).usage
    assert longer.prompt_tokens_details.cached_tokens == cached
    assert longer.prompt_tokens - u.prompt_tokens >= count(history[0]["content"]) + count(history[1]["content"])
    # streamed: the usage chunk says the same
    content, finish, chunks = streamed(client, sid)
    assert content == reply.choices[0].message.content == answer["text"] and finish == "length"
    assert chunks[-1].usage.model_dump() == u.model_dump()


def test_max_tokens_cuts_the_reply_at_the_engines_own_pieces(client, watched):
    sid, pieces, answer = watched
    for params in ({"max_tokens": 3}, {"max_completion_tokens": 3}, {"max_tokens": 5, "max_completion_tokens": 3}):
        reply = ask(client, sid, **params)
        assert reply.choices[0].message.content == "".join(pieces[:3]).strip(), params
        assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 3
        assert reply.usage.total_tokens == reply.usage.prompt_tokens + 3
        content, finish, chunks = streamed(client, sid, **params)
        assert (content, finish) == ("".join(pieces[:3]).strip(), "length")
        assert chunks[-1].usage.completion_tokens == 3
    # a cap the answer stays within changes nothing
    reply = ask(client, sid, max_tokens=LIMIT + 5)
    assert reply.choices[0].message.content == answer["text"] and reply.usage.completion_tokens == LIMIT


def test_stop_ends_the_reply_before_the_stop_string(client, watched):
    sid, pieces, answer = watched
    text = answer["text"]
    at = next(i for i in range(3, len(text) - 2) if text[i:i + 2].strip() and text.find(text[i:i + 2]) == i)
    stop = text[at:at + 2]
    want = text[:at].rstrip()
    for value in (stop, [stop, "\u2603never\u2603"]):
        reply = ask(client, sid, stop=value)
        assert reply.choices[0].message.content == want and reply.choices[0].finish_reason == "stop"
        content, finish, chunks = streamed(client, sid, stop=value)
        assert (content, finish) == (want, "stop")
        assert not any(stop in (c.choices[0].delta.content or "") for c in chunks if c.choices)
        # the tokens written: the pieces up to the one that completed the stop string
        upto = next(n for n in range(1, len(pieces) + 1) if stop in "".join(pieces[:n]).lstrip())
        assert reply.usage.completion_tokens == chunks[-1].usage.completion_tokens == upto
    reply = ask(client, sid, stop="\u2603never\u2603")
    assert reply.choices[0].message.content == text and reply.choices[0].finish_reason == "length"


def test_greedy_values_are_accepted_and_sampling_is_refused_by_name(client, http, watched):
    sid, pieces, answer = watched
    reply = ask(client, sid, temperature=0, top_p=1, seed=7, n=1, presence_penalty=0, frequency_penalty=0,
                logprobs=False, user="u-1", metadata={"k": "v"}, store=False, tool_choice="none",
                response_format={"type": "text"})
    assert reply.choices[0].message.content == answer["text"]
    refused = [({"temperature": 0.7}, "temperature"), ({"temperature": 1}, "temperature"), ({"top_p": 0.9}, "top_p"),
               ({"n": 2}, "n 2"), ({"logprobs": True}, "logprobs"), ({"top_logprobs": 3}, "top_logprobs"),
               ({"presence_penalty": 0.5}, "presence_penalty"), ({"frequency_penalty": 1}, "frequency_penalty"),
               ({"logit_bias": {"1": 5}}, "logit_bias"), ({"response_format": {"type": "json_object"}},
                                                          "response_format"),
               ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
               ({"reasoning_effort": "low"}, "reasoning_effort"), ({"modalities": ["text", "audio"]}, "modalities"),
               ({"max_tokens": 0}, "max_tokens"), ({"max_completion_tokens": "3"}, "max_completion_tokens"),
               ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"stop": [""]}, "stop"), ({"seed": 1.5}, "seed")]
    for params, name in refused:
        with pytest.raises(openai.BadRequestError) as e:
            ask(client, sid, **params)
        message = e.value.body["message"]
        assert name in message and "\n" not in message, (params, message)
    # a parameter this server does not know is refused by name, streamed or not
    for stream in (False, True):
        r = http.post("/v1/chat/completions", json={"model": MODEL_ID, "stream_id": sid, "stream": stream,
                                                    "messages": [{"role": "user", "content": QUESTION}],
                                                    "mirostat_tau": 5})
        assert r.status_code == 400 and "mirostat_tau" in r.json()["error"]["message"]
        assert r.json()["error"]["code"] == "unsupported_parameter"


def test_a_spoken_question_reply_gives_the_words_heard(server, http, tmp_path):
    """An input_audio part: the reply's "streamvid" object has the transcript, the question the stream's own answer
    event was asked (read from its events), which the recogniser heard the spoken words in."""
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    got, stop = [], threading.Event()

    def read():
        with httpx.stream("GET", f"{server}/v1/streams/{sid}/events", timeout=120.0) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got.append(strict_json(line[6:]))
                if stop.is_set():
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        samples = spoken(tmp_path, "what colour is the star", 16000)
        buf = io.BytesIO()
        with wave.open(buf, "wb") as w:
            w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
            w.writeframes(samples.tobytes())
        part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(buf.getvalue()).decode(),
                                                       "format": "wav"}}
        client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120.0)
        reply = client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": sid},
                                               messages=[{"role": "user", "content": [part]}])
        extra = reply.model_extra["streamvid"]
        assert {"what", "star"} <= set(words(extra["transcript"]))
        answer = wait_until(lambda: next((e for e in got if e["type"] == "answer" and e["id"] ==
                                          extra["question_id"]), None), what="the answer event")
        assert answer["question"] == extra["transcript"]
        # streamed: the last chunk's object says it too; a typed question's reply has no transcript
        body = {"model": MODEL_ID, "stream_id": sid, "stream": True, "messages": [{"role": "user", "content": [part]}]}
        with http.stream("POST", "/v1/chat/completions", json=body) as r:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        assert {"what", "star"} <= set(words(events[-1]["streamvid"]["transcript"]))
        typed = client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": sid},
                                               messages=[{"role": "user", "content": "what colour is the star"}])
        assert "transcript" not in typed.model_extra["streamvid"]
    finally:
        stop.set()
        http.delete(f"/v1/streams/{sid}")
        reader.join(10)


def test_reply_holds_back_what_may_begin_a_stop_string_and_counts_a_cap_it_ends_at_as_no_cut():
    """chat_params.Reply on hand-written pieces: text that could begin a stop string is held until it cannot; a reply
    whose answer ends exactly at the cap is not "length"."""
    from types import SimpleNamespace

    from streamvid.serve.chat_params import Limits, Reply

    options = SimpleNamespace(max_new_tokens=8)
    reply = Reply(Limits(stop=("END", "\n\n")))
    assert [reply.feed(p) for p in (" Hello", " E", "N", "T then", " E", "N", "D more")] == \
        ["Hello", "", "", " ENT then", "", "", ""]
    answer = {"text": "Hello ENT then END more", "tokens": 7, "prompt_tokens": 10, "context_tokens": 30}
    assert reply.finish(answer) == "" and reply.sent == "Hello ENT then"
    assert reply.finish_reason(answer, options) == "stop"
    assert reply.usage(answer)["completion_tokens"] == 7 and reply.usage(answer)["prompt_tokens"] == 40
    exact = Reply(Limits(max_tokens=2))
    assert [exact.feed(p) for p in ("a", "b")] == ["a", "b"]
    assert exact.finish({"text": "ab", "tokens": 2}) == "" and exact.finish_reason({"tokens": 2}, options) == "stop"
    over = Reply(Limits(max_tokens=2))
    assert [over.feed(p) for p in ("a", "b", "c")] == ["a", "b", ""]
    assert over.finish({"text": "abc", "tokens": 3}) == "" and over.finish_reason({"tokens": 3}, options) == "length"
    assert over.usage({"tokens": 3})["completion_tokens"] == 2
