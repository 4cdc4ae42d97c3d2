"""StreamClock: one stream's time, the one place an input's times become stream times.

A run of a stream reads its input on the input's own clock: a file's first frame at 0, a pushed frame at its
client's time, an utterance at its place in the sound. A stream's time is its session's: a new session starts at 0,
a resumed one where its saved run ended. The clock holds that one offset, `start_s`, and is shared by everything of
the stream that reads or writes a time (ingest, reasoning, the assistant around it). An input time crosses it once,
where it enters the stream; answers report both.

    clock = StreamClock()
    clock.resume(120.0)              # a resumed session: this run's input starts at stream time 120 s
    clock.stream_t(3.5)              # 123.5: the input's 3.5 s on the stream's clock
    clock.input_t(123.5)             # 3.5
    clock.frame(frame)               # the frame at its stream time (the same object while start_s is 0)

Thread contract: `resume` before the run's first frame; the rest from any thread.
"""

from __future__ import annotations

import dataclasses

from streamvid.types import Frame, Utterance


class StreamClock:
    def __init__(self, start_s: float = 0.0):
        self.start_s = start_s  # stream time at which this run's input started

    def resume(self, start_s: float) -> None:
        """This run's input starts at stream time `start_s` (a resumed session's)."""
        self.start_s = float(start_s)

    def stream_t(self, input_t_s: float) -> float:
        return input_t_s + self.start_s

    def input_t(self, stream_t_s: float) -> float:
        return stream_t_s - self.start_s

    def frame(self, frame: Frame) -> Frame:
        """`frame` at its stream time."""
        return dataclasses.replace(frame, t_s=frame.t_s + self.start_s) if self.start_s else frame

    def utterance(self, utterance: Utterance) -> Utterance:
        """`utterance` at its stream times."""
        if not self.start_s:
            return utterance
        return dataclasses.replace(utterance, t_s=utterance.t_s + self.start_s,
                                   t_end_s=utterance.t_end_s + self.start_s)
