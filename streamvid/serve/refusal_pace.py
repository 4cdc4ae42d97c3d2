"""Who keeps retrying a refusal at once: the refusals an address gets, paced.

    pace = RefusalPace()
    if hold := pace.hold_s(address):   # past PACE_AFTER refusals within PACE_WINDOW_S
        await asyncio.sleep(hold)      # the refusal waits out the Retry-After it carries, then is sent

Used where a refusal is cheap to send and a client may ask again at once: a 429 of `/v1/audio/speech` when every
synthesis slot is taken, and the front door's refusals of request bodies (413 over the cap, 408 too slow).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque

PACE_AFTER, PACE_WINDOW_S = 4, 1.0  # refusals an address gets at once within the window; the next ones are held
HOLD_S = 1.0  # how long (the Retry-After a paced refusal carries)


class RefusalPace:
    """Who keeps retrying a refusal at once: an address refused more than PACE_AFTER times within PACE_WINDOW_S has
    its next refusals held HOLD_S before they are sent (the Retry-After it was told), so a client that ignores
    Retry-After costs a held connection, not a request loop spinning on the server's cores. Only refusals are
    counted and held: a request that gets a slot is never slowed, whatever its address. Bounded (`max_addresses`
    most recently refused); thread-safe; `clock` in seconds (for tests)."""

    def __init__(self, clock=time.monotonic, max_addresses: int = 10_000):
        self.clock, self.max_addresses = clock, max_addresses
        self._refused: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def hold_s(self, address: str) -> float:
        """Record one refusal of `address`; how long to hold it before it is sent."""
        now = self.clock()
        with self._lock:
            times = self._refused.pop(address, None) or deque(maxlen=PACE_AFTER + 1)
            while times and times[0] <= now - PACE_WINDOW_S:
                times.popleft()
            times.append(now)
            self._refused[address] = times
            while len(self._refused) > self.max_addresses:
                self._refused.popitem(last=False)
            return HOLD_S if len(times) > PACE_AFTER else 0.0
