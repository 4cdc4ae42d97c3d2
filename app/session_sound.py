"""A page session's sound: the microphone's sound to its push stream, and "hold to talk" questions. A part of
`streamvid_app.sessions.Session` (its thread contract and fields), kept here to keep that module short."""

from __future__ import annotations

from streamvid_app.voice import pcm16, spoken_question


class SessionSound:
    """`push_audio` and `talk` of `Session`, which provides `hub`, `voice`, `touch`, `ask` and the fields used."""

    def push_audio(self, rate: int, samples) -> dict | None:
        """Microphone sound (an int16 or float array, mono or channels last, at `rate` Hz) to the running push stream,
        where the last sound ended; None when no push stream runs (the microphone is on before the webcam), or while
        "hold to talk" is on: then the sound is the question `talk(False)` asks."""
        self.touch()
        if self._talk.add(rate, samples):
            return None
        stream = self._stream
        if stream is None or stream.target.kind != "push" or stream.closed or stream.stopped or stream.sid is None:
            return None
        return self.hub.push_audio(stream.sid, pcm16(samples).tobytes(), "audio/pcm", int(rate))

    def talk(self, on: bool) -> tuple[str, str] | None:
        """"Hold to talk": on, the microphone's sound is recorded as a question (and what is being said stops); off,
        its words are asked (the hub's recogniser, a leading wake word left out): (question, id), or None if it was
        not on. Refused (one line) when no words were heard or no stream runs."""
        self.touch()
        if on:
            self._talk.start()
            if self.voice is not None:
                self.voice.interrupt()
            return None
        wav = self._talk.stop()
        if wav is None:
            return None
        with self._cond:
            stream = self._running()
        question = spoken_question(self.hub, stream.sid, wav)
        return question, self.ask(question)
