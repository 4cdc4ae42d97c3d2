"""The page's voice: answers and alerts spoken aloud in the browser, sentence by sentence as they are generated, and
questions asked by holding the microphone ("hold to talk"). No web framework here: voice_ui.py puts it on the page.

    voice = page_voice("auto")              # the best installed voice (streamvid.audio.voices), shared by the sessions
    pv = PageVoice(voice)                   # one per session
    pv.on_item(item)                        # the stream's outputs (fan-out thread): answer pieces, answers, alerts
    pv.interrupt(); qid = hub.ask(...); pv.asked(qid)    # a question from the page: what is spoken stops
    pv.next_clip()                          # the page's player: a WAV to play, STOP, or None (nothing to do)
    pv.next_clip(ended=True, wait_s=5.0)    # the player reached the end of its clip: the next one, without a gap

Each answer is an utterance with its own `streamvid.audio.spoken.Speaker`: its pieces are fed as they arrive, so a
finished sentence is synthesized while the rest is still being generated, and the page plays it at once. An answer to a
question asked some other way (by the wake word) interrupts what is being spoken, as a question typed on the page
does (`interrupt`: every speaker cancelled, the player told to stop); an alert is spoken after what is being said.
The player is free when it says its clip ended, or (a page that never says so) a little after the clip's length.
A session's voice says nothing until a player asks for clips (`next_clip`) and stops synthesizing when none has asked
for `player_timeout_s` (a client of the API, a closed or unticked player): no audio is made that nobody plays. At most
QUEUED_MAX utterances wait their turn (an alert past that is not spoken), and `played` keeps the last PLAYED_KEPT.

Thread contract: every method may be called from any thread; one lock guards the state; speakers run on their own
threads ("streamvid-app-speak") and only append audio under the lock.
"""

from __future__ import annotations

import io
import logging
import shutil
import tempfile
import threading
import time
import wave
from collections import deque
from pathlib import Path

import numpy as np

from streamvid.audio.spoken import OUT_RATE, Speaker
from streamvid.audio.voices import Voice, VoiceUnavailable, available_voices, load_voice
from streamvid.errors import Refused

log = logging.getLogger(__name__)

STOP = "stop"  # next_clip: the player should stop the clip it plays
SLACK_S = 1.5  # a clip's player counts as busy this long after the clip's length, unless it says it ended
CLIPS_KEPT = 4  # WAV files a session keeps (the page's framework copies each one when it sends it)
MAX_TALK_S = 60.0  # the longest question a "hold to talk" recording keeps
TALK_RATES = (8000, 48000)  # the microphone sample rates "hold to talk" takes (Hz): the cap is in samples of these
PLAYER_TIMEOUT_S = 30.0  # a session's voice stops synthesizing when its player has not asked for a clip this long
QUEUED_MAX = 8  # utterances waiting to be spoken; an alert past that is not spoken
PLAYED_KEPT = 200  # entries of `played` kept


def page_voice(tts: str | None, strict: bool = True) -> Voice | None:
    """The voice `tts` names ("auto": the best installed, None if there is none; "off": None). A named voice that
    is not installed is a one-line ValueError when `strict`, else a warning and None."""
    tts = (tts or "auto").strip()
    if tts == "off" or (tts == "auto" and not available_voices()):
        return None
    try:
        return load_voice(tts)
    except (VoiceUnavailable, ValueError) as e:
        if strict:
            raise ValueError(f"--tts {tts}: {e}") from None
        log.warning("the page will not speak: %s", e)
        return None


def wav_bytes(pcm: bytes, rate: int = OUT_RATE) -> bytes:
    """A mono 16-bit WAV of PCM16 samples."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(pcm)
    return buf.getvalue()


class _Utterance:
    """One answer or alert being spoken: its speaker and the sentences synthesized, not yet played."""

    def __init__(self, key: str, voice: Voice, owner: PageVoice):
        self.key = key
        self.fed = False  # an answer piece was fed (the answer then only finishes it)
        self.ready: deque[tuple[str, bytes]] = deque()  # (sentence, PCM16) not yet taken by the player
        self.sentence = ""  # the sentence whose audio comes next
        self.speaker = Speaker(voice, on_audio=lambda pcm: owner.take_audio(self, pcm), name="streamvid-app-speak",
                               on_sentence=self._on_sentence)

    def _on_sentence(self, sentence: str) -> None:
        self.sentence = sentence  # its audio follows at once, on the same thread

    @property
    def done(self) -> bool:
        return self.speaker.wait(0)


class PageVoice:
    def __init__(self, voice: Voice, enabled: bool = True, player_timeout_s: float | None = None):
        self.voice = voice
        self.enabled = enabled
        self.player_timeout_s = player_timeout_s  # None: speak whether or not a player asks for the clips
        self._player_s: float | None = None  # monotonic time a player last asked for a clip
        self.played: list[tuple[str, str]] = []  # (answer id or "alert:...", sentence) of every clip taken, in order
        self.error: str | None = None  # the last speaker's failure, once (the page shows it)
        self._cond = threading.Condition()
        # guarded by _cond
        self._queue: deque[_Utterance] = deque()  # spoken in order
        self._answers: dict[str, _Utterance] = {}  # answer id -> its utterance (this stream's)
        self._asked: set[str] = set()  # ids of the questions asked on the page
        self._silenced: set[str] = set()  # ids whose answers are not (or no longer) spoken
        self._busy_until = 0.0  # monotonic time the player's clip ends at the latest
        self._stop = False  # the player plays a clip that was interrupted
        self._dir: Path | None = None
        self._clips: deque[Path] = deque()
        self._count = 0

    # ---- what is said ---------------------------------------------------------------------------------
    def on_item(self, item: dict) -> None:
        """One output of the session's stream: answer pieces and answers are spoken (an answer to a question not
        asked on the page, by the wake word, first interrupts), alerts are spoken after what is being said."""
        kind = item.get("type")
        if kind not in ("answer.delta", "answer", "alert"):
            return
        with self._cond:
            if not self.listened():
                return
            if kind == "alert":
                if len(self._queue) >= QUEUED_MAX:
                    return
                text = str(item.get("text") or f"Alert: {item.get('condition', '')}")
                self._start(f"alert:{item.get('alert_id') or item.get('t_s')}").speaker.say(text)
                return
            aid = str(item.get("id"))
            if aid in self._silenced:
                return
            u = self._answers.get(aid)
            if u is None:
                if aid not in self._asked:
                    self._cancel_all()  # asked by voice: as a question typed on the page, it interrupts
                u = self._answers[aid] = self._start(aid)
            if kind == "answer.delta":
                u.fed = True
                u.speaker.feed(str(item.get("text", "")))
            elif u.fed:
                u.speaker.finish()
            else:  # an answer that came whole
                u.speaker.say(str(item.get("text") or ""))

    def interrupt(self) -> None:
        """Stop speaking: every speaker cancelled, the answers under way silenced, the player told to stop."""
        with self._cond:
            self._cancel_all()

    def asked(self, qid: str) -> None:
        """Question `qid` was asked on the page (after `interrupt`): its answer is spoken when it comes."""
        with self._cond:
            self._asked.add(str(qid))

    def reset(self) -> None:
        """A fresh stream (its ids start again): nothing of the last one is spoken."""
        with self._cond:
            self._cancel_all()
            self._answers, self._asked, self._silenced = {}, set(), set()

    def set_enabled(self, on: bool) -> None:
        with self._cond:
            self.enabled = bool(on)
            if not on:
                self._cancel_all()

    def listened(self) -> bool:
        """Whether what is said now is synthesized: speaking is on and a player asked for a clip lately."""
        with self._cond:
            if not self.enabled:
                return False
            return self.player_timeout_s is None or (
                self._player_s is not None and time.monotonic() - self._player_s <= self.player_timeout_s)

    @property
    def queued(self) -> int:
        """Utterances being synthesized or waiting to be played."""
        with self._cond:
            return len(self._queue)

    def speaking(self) -> bool:
        """Whether anything is being said or waits to be (the player's clip included)."""
        with self._cond:
            return bool(self._queue) or time.monotonic() < self._busy_until

    def close(self) -> None:
        with self._cond:
            self._cancel_all()
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    # ---- the player -----------------------------------------------------------------------------------
    def next_clip(self, ended: bool = False, wait_s: float = 0.0) -> str | None:
        """What the page's player does now: the path of a WAV of the sentences ready (when it is free), STOP (its
        clip was interrupted and nothing follows yet), or None (nothing to do). `ended`: its clip ended, so it is
        free; then the next sentence of what is being said is waited for up to `wait_s`."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._player_s = time.monotonic()
            if ended:
                self._busy_until = 0.0
            while True:
                now = time.monotonic()
                if now < self._busy_until:
                    return None
                taken = self._take()
                if taken is not None:
                    return self._write(*taken)
                if self._stop:
                    self._stop = False
                    return STOP
                if not self._queue or now >= deadline:
                    return None
                self._cond.wait(deadline - now)

    # ---- internals (with _cond held) ------------------------------------------------------------------
    def _start(self, key: str) -> _Utterance:
        u = _Utterance(key, self.voice, self)
        self._queue.append(u)
        return u

    def _cancel_all(self) -> None:
        for u in self._queue:
            u.speaker.cancel()
        self._silenced.update(self._answers)
        self._queue.clear()
        if time.monotonic() < self._busy_until:
            self._stop, self._busy_until = True, 0.0
        self._cond.notify_all()

    def take_audio(self, u: _Utterance, pcm: bytes) -> None:  # a speaker's thread
        with self._cond:
            if u in self._queue and not u.speaker.cancelled:
                u.ready.append((u.sentence, pcm))
                self._cond.notify_all()

    def _take(self) -> tuple[str, list[str], bytes] | None:
        """The sentences ready of the first utterance still being said (finished ones dropped)."""
        while self._queue:
            u = self._queue[0]
            if u.ready:
                parts = list(u.ready)
                u.ready.clear()
                return u.key, [s for s, _ in parts], b"".join(pcm for _, pcm in parts)
            if not u.done:
                return None
            if u.speaker.error is not None:
                self.error = f"speaking stopped: {u.speaker.error}"
            self._queue.popleft()
        return None

    def _write(self, key: str, sentences: list[str], pcm: bytes) -> str:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="streamvid-voice-"))
        self._count += 1
        path = self._dir / f"answer-{self._count}.wav"  # a new name each time: the page plays a new source
        path.write_bytes(wav_bytes(pcm))
        self._clips.append(path)
        while len(self._clips) > CLIPS_KEPT:
            self._clips.popleft().unlink(missing_ok=True)
        self._busy_until = time.monotonic() + len(pcm) / 2 / OUT_RATE + SLACK_S
        self.played.extend((key, s) for s in sentences)
        del self.played[:-PLAYED_KEPT]
        return str(path)


def pcm16(samples) -> np.ndarray:
    """Mono int16 samples of the microphone's (int16 or float in [-1, 1], mono or channels last)."""
    x = np.asarray(samples)
    if x.ndim == 2:
        x = x.mean(axis=1)
    if x.dtype.kind == "f":
        x = np.clip(np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0), -1.0, 1.0) * 32767
    return np.asarray(x, dtype="<i2")


def spoken_question(hub, sid: str, wav: bytes) -> str:
    """The words of a recorded question about stream `sid` (the hub's recogniser); Refused (one line) when the
    recording is empty or no words are heard in it."""
    if not wav:
        raise Refused("hold to talk: nothing was recorded (record with the microphone in the Webcam tab)")
    try:
        return hub.spoken_question(sid, wav, "wav")
    except Refused as e:
        raise Refused(str(e).replace("input_audio: ", "hold to talk: ")) from None


class TalkRecording:
    """What the microphone hears while "hold to talk" is on: a question, kept (up to MAX_TALK_S at its rate, one of
    TALK_RATES: at most 60 s x 48 kHz x 2 bytes, whatever rate a client declares) until it is let go. Any thread (one
    lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._on = False
        self._rate: int | None = None
        self._parts: list[np.ndarray] = []
        self._n = 0

    @property
    def on(self) -> bool:
        return self._on

    def start(self) -> None:
        with self._lock:
            self._on, self._rate, self._parts, self._n = True, None, [], 0

    def add(self, rate: int, samples) -> bool:
        """Keep the microphone's sound if recording (True), else leave it to the stream (False). Refused (one
        line) at a rate outside TALK_RATES."""
        with self._lock:
            if not self._on:
                return False
            rate = int(rate)
            if not TALK_RATES[0] <= rate <= TALK_RATES[1]:
                raise Refused(f"hold to talk: the microphone's rate of {rate} Hz is not one this page takes "
                              f"({TALK_RATES[0]} to {TALK_RATES[1]} Hz)")
            if self._rate is None:
                self._rate = rate
            room = int(MAX_TALK_S * rate) - self._n  # beyond the cap the rest is dropped
            if rate == self._rate and room > 0:
                x = np.asarray(samples)[:room]  # cut before it is converted
                x = pcm16(x)
                self._parts.append(x)
                self._n += len(x)
            return True

    def stop(self) -> bytes | None:
        """The recording as WAV bytes (b"" when nothing was heard), or None when it was not recording."""
        with self._lock:
            if not self._on:
                return None
            self._on = False
            if not self._n or self._rate is None:
                return b""
            return wav_bytes(np.concatenate(self._parts).tobytes(), self._rate)
