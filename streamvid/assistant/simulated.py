"""A replay of a recorded input, stepped on the caller's thread: StreamingAssistant's `run_simulated`.

    outs = sa.run_simulated(open_source("clip.mp4", fps=2.0), questions_at=[(12.0, "What colour is the star?")])

Every frame is ingested in order and the engine is stepped until it is idle after each, so a replay's answers,
alerts and remarks are the same on every run (eval/ and bench replay benchmarks this way). A mixin of the assistant:
it works on the assistant's own stream, window, ingest and outputs.
"""

from __future__ import annotations

import dataclasses
import queue
from collections.abc import Sequence

from streamvid.assistant.hearing import hearing_for
from streamvid.language.asked import Question, condition_of, watched
from streamvid.types import Output


class SimulatedRun:
    """`run_simulated`, for StreamingAssistant (which holds the stream, window, ingest, reasoning and outputs)."""

    def run_simulated(self, source, questions_at: Sequence[tuple[float, str]],
                      probes_at: Sequence[tuple[float, str]] = (),
                      watches_at: Sequence[tuple[float, str]] = ()) -> list[Output]:
        """Ingest every frame of `source` in order, stepping the engine on this thread until it is idle after each;
        answer each question (and yes/no probe) at its stream time T from exactly the frames with t <= T (those
        of an unfinished chunk are encoded for that answer alone: the window and memory get every chunk whole,
        whenever questions come); start each watch at its T. After every new chunk the triggers are probed and
        narration decides, as the scheduler does live, so alerts and remarks are reproducible. A "tell me when"
        question gets its acknowledgement at T and its alert when the event is seen.
        Times T are the input's own (0 = its first frame); in a resumed session they sit at T + stream_offset_s
        of the session's clock, which answers report as t_s (and T as input_t_s).
        Returns answers, probe results, alerts and remarks in stream-time order (no token pieces). Not to be
        mixed with `start`, nor run on an engine whose scheduler thread runs."""
        if self.engine.running:
            raise RuntimeError("run_simulated steps the engine itself: its scheduler thread must not run")
        pending = sorted([(t, text, "answer") for t, text in questions_at] +
                         [(t, text, "probe") for t, text in probes_at] +
                         [(t, text, "watch") for t, text in watches_at], key=lambda q: q[0])
        results: list[Output] = []
        self.ingest.source = source
        self._tap(source)
        # each question and watch parsed once, known ahead: the recogniser listens for the phrases asked from their
        # time on
        parsed = {"answer": condition_of, "watch": watched, "probe": lambda text: None}
        pending = [(t, text, kind, parsed[kind](text)) for t, text, kind in pending]
        for t, _, _, condition in pending:
            self.stream.listening.note(condition, self.stream.clock.stream_t(t))
        self.hearing = hearing_for(self.config, source, self.stream, replay=True)

        def drain() -> None:
            self.engine.run_until_idle()
            self._raise_error()
            while True:
                try:
                    out = self._outputs.get_nowait()
                except queue.Empty:
                    return
                if out.kind != "token":
                    results.append(out)

        def handle_next() -> None:
            t, text, kind, condition = pending.pop(0)
            t = self.stream.clock.stream_t(t)  # times are the input's own; the session's clock may have started earlier
            if kind == "watch":  # starts with the next decided chunk; the chunking is left as it is
                self.stream.watch(condition, t)
                return
            snap = self.window.snapshot()
            if (tail := self.ingest.tail()) is not None:  # the unfinished chunk, for this answer alone
                snap = dataclasses.replace(snap, blocks=(*snap.blocks, tail))
            if kind == "answer":
                self.stream.put(text, t, condition, snapshot=snap)
                drain()
            else:
                results.append(self.reasoning.probe(Question(f"p{len(results)}", text, t), snap))

        while (frame := source.read()) is not None:
            while pending and pending[0][0] < frame.t_s:
                handle_next()
            self._offer(frame)
            self.stream.insert(frame)
            drain()
        if self.alert_media is not None:
            self.alert_media.end_input()
        self.stream.finish()
        drain()
        while pending:
            handle_next()
        drain()
        return results
