"""Things loaded once per process stay one when many threads ask at once: `streamvid.once`, and the speech
recogniser and voice detector that every stream's first sound loads (eight streams hearing their first sound at the
same moment used to load eight recognisers, ~1 GB, each with a queue of its own)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from streamvid.once import once


def test_callers_racing_the_first_load_get_the_one_object():
    loads = []

    @once(maxsize=2)
    def load(name: str) -> object:
        loads.append(name)
        time.sleep(0.3)  # a load long enough for every racer to arrive while it runs
        return object()

    start, got = threading.Barrier(8), []

    def ask() -> None:
        start.wait()
        got.append(load("a"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == ["a"] and len({id(x) for x in got}) == 1
    assert load("b") is not got[0] and loads == ["a", "b"]
    load.cache_clear()
    assert load("a") is not got[0]


RACE = """
import threading
from streamvid.audio.asr import load_recognizer
from streamvid.audio.vad import silero
start, got = threading.Barrier(8), []
def first_sound():
    start.wait()
    got.append((load_recognizer(), silero()))
threads = [threading.Thread(target=first_sound) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(len({id(r) for r, _ in got}), len({id(v) for _, v in got}))
"""


def test_streams_hearing_their_first_sound_at_once_share_one_recogniser():
    """In a fresh process (nothing loaded yet), eight threads load the default recogniser and the voice detector at
    the same moment: one of each."""
    out = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["1", "1"], out.stdout + out.stderr[-2000:]
