"""What a user asks is parsed once where it enters a stream, and carried typed from there (language/asked.py): the
stream checks and queues the parsed question, the listening and the reasoning act on it, and nothing parses the text
again. Asking and watching run off the server's event loop (they template and tokenise)."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter

import pytest

from streamvid.language.asked import Condition, Question, condition_of, watched
from streamvid.language.future import Probe
from streamvid.language.heard import Heard
from streamvid.serve.options import ServeOptions
from streamvid.serve.service import HubService

GRAMMAR = ("condition_of", "watched", "parse_request", "heard_condition")


@pytest.fixture
def parses(monkeypatch) -> Counter:
    """Every call into the grammar from outside language/, counted, wherever a module of the library holds one of
    its entry points."""
    calls: Counter = Counter()

    def counting(name, real):
        def count(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return count

    for module in [m for n, m in sys.modules.items() if n.startswith("streamvid.")
                   and not n.startswith("streamvid.language") and m is not None]:
        for name in GRAMMAR:
            if callable(real := module.__dict__.get(name)):
                monkeypatch.setattr(module, name, counting(name, real))
    return calls


def test_the_parsed_forms():
    c = condition_of("Tell me whenever someone says 'stop'.")
    assert (c.phrase, c.heard, c.repeat, c.listens_for) == ("someone says 'stop'", Heard("stop"), True, "stop")
    assert c.acknowledgement() == "OK, I will tell you every time someone says 'stop'."
    assert condition_of("What colour is the circle?") is None
    star = watched("a blue star appears")
    assert (star.heard, star.probe.question, star.listens_for) == (None, "Is there a blue star now? Answer yes or no.",
                                                                    None)
    assert watched("Tell me when a blue star appears").probe == star.probe
    assert watched("said: help me").listens_for == "help me"
    with pytest.raises(ValueError, match="said: condition needs a word"):
        watched('said: ""')
    assert Question("q0", "Let me know when a red circle appears", 1.0).condition.phrase == "a red circle appears"


def test_a_question_asked_is_parsed_once_on_its_way_to_its_trigger(engine, parses):
    s = engine.open()
    try:
        qid = s.ask("Tell me when someone says 'hexagon'.")
        assert parses == {"condition_of": 1}
        engine.run_until_idle()  # the question is taken and acknowledged: no second parse
        ack = [o for o in drain(s) if o.kind == "answer"]
        assert [(a.id, a.text, a.data.get("trigger_id")) for a in ack] == [
            (qid, "OK, I will tell you when someone says 'hexagon'.", qid)]
        assert [(t.id, t.heard) for t in s.reasoning.triggers.active()] == [(qid, Heard("hexagon"))]
        assert s.hints(0.0).endswith("hexagon")  # the listening noted the parsed phrase
        assert parses == {"condition_of": 1}
    finally:
        s.close()


def test_a_scheduled_question_is_parsed_once_when_scheduled(engine, parses):
    s = engine.open()
    try:
        s.schedule(0.0, "Let me know whenever someone says 'stop'")
        s.finish()  # its time comes at once: it is asked, queued and acknowledged
        engine.run_until_idle()
        assert [o.text for o in drain(s) if o.kind == "answer"] == [
            "OK, I will tell you every time someone says 'stop'."]
        assert parses == {"condition_of": 1}
    finally:
        s.close()


def test_reasoning_acts_on_the_questions_condition_not_its_text(engine):
    """A question made with its condition parsed already is acted on as that condition (nothing re-reads the
    text): here a watch on a phrase, handed in with text that asks nothing of the future."""
    s = engine.open()
    try:
        c = Condition("someone says 'apple'", Probe("said: apple", False, 'Someone said "apple".'), Heard("apple"),
                      repeat=False)
        s.put("What is on screen?", 0.0, c)
        engine.run_until_idle()
        assert [o.text for o in drain(s) if o.kind == "answer"] == ["OK, I will tell you when someone says 'apple'."]
        assert "apple" in s.hints(0.0)
    finally:
        s.close()


def drain(stream) -> list:
    out = []
    while not stream.outputs.empty():
        out.append(stream.outputs.get_nowait())
    return out


class RecordingHub:
    """A stand-in for the hub that records the thread each call runs on (the service's own code is under test)."""

    options = ServeOptions()

    def __init__(self):
        self.threads: dict[str, threading.Thread] = {}

    def _at(self, name):
        self.threads[name] = threading.current_thread()

    def ask(self, sid, text, dialogue=None):
        self._at("ask")
        return "q0"

    def watch(self, sid, condition, fire=None, reset=None):
        self._at("watch")
        return {"trigger_id": "w0"}

    def unwatch(self, sid, wid):
        self._at("unwatch")
        return {"removed": True}

    def subscribe(self, sid, deltas=False, loop=None):
        class Answered:
            async def get(self, timeout):
                return {"type": "answer", "id": "q0", "text": "two"}
        return Answered()

    def unsubscribe(self, sid, sub):
        pass


def test_the_service_asks_and_watches_off_the_event_loop():
    hub = RecordingHub()
    service = HubService(hub)

    async def calls():
        await service.question("s0", "What is it?")
        asked = [item async for item in service.ask("s0", "What is it?")]
        await service.watch("s0", "a blue star appears")
        await service.unwatch("s0", "w0")
        return threading.current_thread(), asked

    loop_thread, asked = asyncio.run(calls())
    assert [i["type"] for i in asked] == ["question", "answer"]
    assert set(hub.threads) == {"ask", "watch", "unwatch"}
    assert all(t is not loop_thread for t in hub.threads.values())
