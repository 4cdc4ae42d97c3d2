"""How fast sound may be pushed to one stream: a token bucket of seconds of audio, so a client cannot make the
recogniser hear hours in minutes (`POST /v1/streams/{id}/audio`, the realtime socket's `input_audio_buffer.append`).

    budget = SoundBudget()              # 2 s of audio per second of wall time, a burst of 10 s
    budget.take(0.2)                    # Busy (one line, with the wait) while the stream is over its budget

The bucket holds up to BURST_S seconds and refills at SPEED times real time. A push is taken while the bucket is
not in debt, and its whole length is taken out of it (it may go below zero): a microphone sending in real time is
never refused, a single body of up to MAX_PUSH_S (10 minutes) is taken at once, and the pushes after it wait until
it has been paid back, so over any stretch a stream gets at most SPEED times real time plus the burst. A refused
push changes nothing (and one refused after the budget took it, for a bad body or time, is given back); the
stream and the socket go on. `clock` is injectable (tests drive it by hand); the module's
`clock` is what a budget reads by default, looked up at each call.
"""

from __future__ import annotations

import math
import threading
import time

from streamvid.errors import Busy

SPEED = 2.0  # seconds of audio per second of wall time, sustained
BURST_S = 10.0  # seconds of audio a stream may push at once beyond that

clock = time.monotonic


class SoundBudget:
    def __init__(self, speed: float = SPEED, burst_s: float = BURST_S, clock=None):
        self.speed, self.burst_s = speed, burst_s
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = burst_s
        self._at: float | None = None

    def now(self) -> float:
        return self._clock() if self._clock is not None else clock()

    def take(self, seconds: float) -> None:
        """Take `seconds` of pushed audio, or refuse it (Busy) while the stream is over its budget."""
        with self._lock:
            tokens = self._refill()
            if tokens < 0:
                wait = math.ceil(-tokens / self.speed * 10) / 10
                raise Busy(f"sound is coming faster than {self.speed:g}x real time (a {self.burst_s:g}-s burst "
                           f"beyond it): this stream takes more in {wait:g} s")
            self._tokens = tokens - seconds

    def give_back(self, seconds: float) -> None:
        """Return what a push took that was refused after it (a body that did not decode, a time that went back)."""
        with self._lock:
            self._tokens = min(self.burst_s, self._refill() + seconds)

    def available_s(self) -> float:
        """Seconds of audio the bucket holds now (negative: the debt still to be paid back)."""
        with self._lock:
            return self._refill()

    def _refill(self) -> float:
        now = self.now()
        if self._at is not None:
            self._tokens = min(self.burst_s, self._tokens + max(0.0, now - self._at) * self.speed)
        self._at = now
        return self._tokens
