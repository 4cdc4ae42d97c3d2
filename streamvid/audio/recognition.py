"""A recogniser shared fairly: every stream's utterances and spoken questions wait for one recogniser (asr.py) in a
queue per stream, served round-robin on a thread of the recogniser's own, so one stream's backlog delays another's
utterance by at most one utterance of each other stream waiting (besides the one being decoded).

    turns = fair(recognizer)                          # one per recogniser in a process
    text = turns.transcribe(samples, hint, key="s3")  # waits for stream s3's turn (on the caller's own thread)
    future = turns.submit(samples, hint, key="s3")    # the same, as a concurrent.futures.Future
    heard = turns.on_behalf("s3")                     # a Recognizer for stream s3 (a Listener's: hearing.py)
    text = question(recognizer, samples, hint, "s3")  # a spoken question: ValueError (one line) above QUESTION_MAX_S
    result = await off_loop(job, *args)               # blocking sound work on the sound pool, not asyncio's default
                                                      # executor (a request waiting for the recogniser holds no
                                                      # thread other requests need)

Round-robin: the streams with utterances waiting take turns in the order they started waiting; a stream served
goes to the back of the line while it has more. Within a stream, utterances keep their order.

With a backlog a recogniser on the CPU takes at most SHARE of one core: after an utterance that took d seconds to
decode the next one starts no sooner than d * (1 / SHARE - 1) later (`rest_s`), so clients that keep it busy (a
flood of long spoken questions, many streams heard at once) leave the cores to the engine and the requests of
everyone else. An utterance after a pause is decoded at once: a turn's latency is the decoding alone. (A recogniser
on a GPU does not rest.)
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from streamvid.audio.asr import Recognizer
from streamvid.audio.pcm import RATE

QUESTION_MAX_S = 30.0  # the longest spoken question heard (as voice assistants bound a turn)
SOUND_THREADS = 8  # the sound pool's threads (requests that push sound or wait for a spoken question's words)
SHARE = 0.5  # of one core, the most the recogniser takes while it has a backlog
IDLE_S = 2.0  # a recogniser's thread, or a sound pool thread, ends after this long with nothing to do


class FairRecognition:
    """One recogniser's queue, per stream, served round-robin on its own thread (`streamvid-recognise`)."""

    def __init__(self, recognizer: Recognizer):
        self.recognizer = recognizer
        self.name = getattr(recognizer, "name", type(recognizer).__name__)
        self.share = SHARE if str(getattr(recognizer, "device", "cpu")) == "cpu" else 1.0
        self._cv = threading.Condition()
        self._waiting: OrderedDict[str, deque[tuple[Future, Callable[[], str]]]] = OrderedDict()
        self._thread: threading.Thread | None = None

    def submit(self, samples: np.ndarray, hint: str | None = None, key: str = "") -> Future:
        """Queue one utterance of stream `key`; its Future gives the words (or the recogniser's exception)."""
        future: Future = Future()
        job = (future, lambda: self.recognizer.transcribe(samples, hint))
        with self._cv:
            self._waiting.setdefault(key, deque()).append(job)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="streamvid-recognise", daemon=True)
                self._thread.start()
            self._cv.notify()
        return future

    def transcribe(self, samples: np.ndarray, hint: str | None = None, key: str = "") -> str:
        """The words of one utterance of stream `key`, once its turn has come and it is decoded."""
        return self.submit(samples, hint, key).result()

    def on_behalf(self, key: str) -> Recognizer:
        """A Recognizer whose utterances queue as stream `key`'s."""
        return _Turns(self, key)

    @property
    def waiting(self) -> dict[str, int]:
        """Utterances waiting, per stream, in the order their turns come."""
        with self._cv:
            return {key: len(jobs) for key, jobs in self._waiting.items()}

    def _next(self) -> tuple[Future, Callable[[], str]] | None:
        """The next turn's utterance; None (the thread ends) after IDLE_S with none waiting."""
        with self._cv:
            if not self._cv.wait_for(lambda: bool(self._waiting), timeout=IDLE_S):
                self._thread = None  # the next submit starts another
                return None
            key, jobs = next(iter(self._waiting.items()))
            job = jobs.popleft()
            del self._waiting[key]
            if jobs:  # its next utterance waits for one turn of every other stream waiting
                self._waiting[key] = jobs
            return job

    def _serve(self) -> None:
        below_the_engine()
        rest_until = 0.0
        while (job := self._next()) is not None:
            future, run = job
            if (wait := rest_until - time.monotonic()) > 0:
                time.sleep(wait)
            if not future.set_running_or_notify_cancel():
                continue
            start = time.monotonic()
            try:
                future.set_result(run())
            except BaseException as e:  # noqa: BLE001 - the caller gets it (a Listener stops that stream's sound)
                future.set_exception(e)
            end = time.monotonic()
            rest_until = end + rest_s(end - start, self.share)


def rest_s(busy_s: float, share: float = SHARE) -> float:
    """How long the recogniser rests after `busy_s` seconds of decoding so that it takes at most `share` of a core."""
    return busy_s * (1.0 / share - 1.0)


class _Turns:
    def __init__(self, fair: FairRecognition, key: str):
        self.fair, self.key, self.name = fair, key, fair.name

    def transcribe(self, samples: np.ndarray, hint: str | None = None) -> str:
        return self.fair.transcribe(samples, hint, self.key)


_fair: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_fair_lock = threading.Lock()


def fair(recognizer: Recognizer) -> FairRecognition:
    """The one FairRecognition of `recognizer` in this process (asr.load_recognizer shares a loaded recogniser by
    every stream, so all of them queue here)."""
    if isinstance(recognizer, FairRecognition):
        return recognizer
    with _fair_lock:
        try:
            got = _fair.get(recognizer)
        except TypeError:  # not weakly referable: a queue of its own
            return FairRecognition(recognizer)
        if got is None:
            got = _fair[recognizer] = FairRecognition(recognizer)
        return got


def check_question(samples: np.ndarray) -> None:
    """ValueError (one line) for a spoken question longer than QUESTION_MAX_S."""
    if (seconds := len(samples) / RATE) > QUESTION_MAX_S:
        raise ValueError(f"the spoken question lasts {seconds:.1f} s; at most {QUESTION_MAX_S:g} s is heard: ask "
                         f"it in shorter words, or as text")


def question(recognizer: Recognizer, samples: np.ndarray, hint: str | None = None, key: str = "") -> str:
    """The words of a spoken question about stream `key` (float32 mono at pcm.RATE), in that stream's turn.
    ValueError (one line) when it is longer than QUESTION_MAX_S, before anything is decoded."""
    check_question(samples)
    return fair(recognizer).transcribe(samples, hint, key)


class IdlePool:
    """At most `threads` threads named `name` running blocking jobs (decoding sound, waiting for the recogniser,
    synthesizing speech); each ends after IDLE_S idle, so a process that stops using it keeps no thread."""

    def __init__(self, threads: int, name: str = "streamvid-sound"):
        self.threads, self.name = threads, name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = self._idle = 0
        self._queued = 0  # jobs put and not taken yet

    def submit(self, job: Callable, *args) -> Future:
        future: Future = Future()
        with self._lock:
            self._queued += 1
            self._jobs.put((future, job, args))
            # a thread for every job no idle thread waits for (an idle thread may be about to take another job:
            # counting idle threads alone left a job queued behind a long one while a thread was still allowed)
            if self._queued > self._idle and self._running < self.threads:
                self._running += 1
                threading.Thread(target=self._work, name=self.name, daemon=True).start()
        return future

    def _work(self) -> None:
        below_the_engine()
        while True:
            with self._lock:
                self._idle += 1
            try:
                future, job, args = self._jobs.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._queued == 0:
                        self._running -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
                self._queued -= 1
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(job(*args))
                except BaseException as e:  # noqa: BLE001 - the awaiting request gets it
                    future.set_exception(e)


_pool = IdlePool(SOUND_THREADS)


async def off_loop(job: Callable, *args):
    """`job(*args)` on the sound pool (a request that decodes sound or waits for the recogniser), awaited."""
    return await asyncio.wrap_future(_pool.submit(job, *args))


NICENESS = 10  # sound work (voice detection, recognition, synthesis, decoding) gives way to the engine's forwards


def below_the_engine() -> None:
    """Lower the calling thread's CPU priority to NICENESS (Linux: a thread's own niceness, inherited by the threads
    and processes it starts, e.g. espeak-ng); nothing where the platform has no per-thread niceness."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
    except (AttributeError, OSError):
        pass
