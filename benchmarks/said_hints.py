"""What telling the recogniser the watched phrases does to the words it writes, on a stream's sound alone.

    python benchmarks/said_hints.py runs/speechq/s9606 [runs/speechq/s9607 ...]

For each synth folder (`streamvid synth --seed S --out DIR`, with sound): the file's sound as `streamvid run` cuts
it (`FileSource.sound()`, `vad.Segmenter`), each utterance transcribed by the default recogniser twice: told
nothing, and told the phrases of the stream's said questions ("Tell me when someone says 'x'.") asked at or before
the utterance's start (`listening.Listening`, as `Stream.hints` tells it, without a wake word). For every
(utterance, phrase told) pair: whether the gold lines overlapping the utterance say the phrase and whether each
transcript does (`language/text.holds`). No VLM runs. Prints every utterance whose words changed on stderr and
one JSON summary on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from streamvid.audio.asr import load_recognizer
from streamvid.audio.vad import Segmenter
from streamvid.engine.listening import Listening
from streamvid.language.asked import watched
from streamvid.language.text import holds
from streamvid.media.file_source import FileSource


def main() -> None:
    rec = load_recognizer()
    said = {"n": 0, "held_told_nothing": 0, "held_told_phrases": 0}
    unsaid = {"n": 0, "held_told_nothing": 0, "held_told_phrases": 0}
    for folder in map(Path, sys.argv[1:]):
        ep = json.loads((folder / "episodes.jsonl").read_text().splitlines()[0])
        video = folder / ep["video"]["path"]
        gold = json.loads(video.with_suffix(".timeline.json").read_text())["speech"]
        listening = Listening()
        for e in ep["events"]:
            if e.get("task") == "forward_said":
                listening.note(watched(e["text"]), e["t"])
        src, seg, cut = FileSource(str(video), fps=2.0), Segmenter(), []
        for chunk in src.sound() or ():
            cut += seg.feed(chunk)
        cut += seg.flush()
        src.close()
        for u in cut:
            hint = listening.hint(u.t_s)
            plain = rec.transcribe(u.samples)
            told = rec.transcribe(u.samples, hint) if hint else plain
            spoken = " ".join(g["text"] for g in gold if g["t_end_s"] > u.t_s - 0.3 and g["t_s"] < u.t_end_s + 0.3)
            for phrase in (hint or "").split(", ") if hint else ():
                tally = said if holds(spoken, phrase) else unsaid
                tally["n"] += 1
                tally["held_told_nothing"] += holds(plain, phrase)
                tally["held_told_phrases"] += holds(told, phrase)
            if plain != told:
                print(f"{folder.name} {u.t_s:7.2f} said {spoken!r}: {plain!r} -> {told!r} (told {hint!r})",
                      file=sys.stderr)
    print(json.dumps({"recogniser": rec.name, "pairs_where_said": said, "pairs_where_not_said": unsaid}, indent=1))


if __name__ == "__main__":
    main()
