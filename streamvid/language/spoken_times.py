"""Times a question names, as stream times (`stream_times`); and times in a spoken question as a recogniser writes
them, rewritten as the engine reads them: "at 04:13" (`clock_times`).

    stream_times("What was on screen at 03:12?", now_s=600.0)     # [192.0]
    stream_times("What colour was it two minutes ago?", 600.0)    # [480.0]

    clock_times("What was on screen at 4.13?")              # "What was on screen at 04:13?"
    clock_times("What colour was the star at 730?")         # "What colour was the star at 07:30?"
    clock_times("What was said at one minute twenty?")      # "What was said at 01:20?"

Said aloud, "at 04:13" is "at four thirteen" or "at zero four thirteen", and Whisper writes it "at 4.13", "at
413", "at 4 13", "at 0 4 1 3" or in words; "at 00:07" comes out as "at 0.07", "at 007" or "at zero zero seven".
The engine reads a time in a question only as "mm:ss" (stream_times, scope.py), and the bundled model
was trained on "at 04:13". So a number after "at" that reads as minutes and seconds (the seconds below 60) is
rewritten as "mm:ss":
- "at M.SS" or "at M:SS"; "at MSS" or "at MMSS" (three or four digits);
- "at N minute(s) [and] [N [second(s)]]", "at N second(s)" (not "... ago", which is a time before now);
- three or four single digits ("at 0 0 7", "at zero four one three", "at three-zero-zero"); a number and a
  two-digit one ("at 3 45", "at 3-11", "at two fifty-four", "at ten twenty"); two digits and a two-digit number
  ("at zero four thirteen"); a two-digit number and two digits ("at twelve oh five");
with N in digits or words up to fifty-nine. Nothing else is touched ("Is there 1 circle?", "at 5", "at 4.5",
"at 12345", "at 1 2 3 4 5"). Typed questions are not rewritten: only the words a recogniser heard are
(wake_word.spoken_question, and the wake-word questions of stream.py).
"""

from __future__ import annotations

import re

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
          "seventeen eighteen nineteen").split()
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}
_WORD_NUMBER = rf"(?:(?:{'|'.join(_TENS)})(?:[\s-]+(?:{'|'.join(_UNITS[1:10])}))?|{'|'.join(_UNITS)})"
_N = rf"(\d{{1,2}}|{_WORD_NUMBER}|an?)"  # "a minute"
_END = r"(?![\d%]|[.:,]\d)"  # the number ends here (a full stop or comma after it may end the sentence)
_DOTTED = re.compile(rf"\bat\s+(\d{{1,2}})[.:](\d{{2}}){_END}", re.IGNORECASE)
_RUN = re.compile(rf"\bat\s+(\d{{3,4}}){_END}", re.IGNORECASE)
_MINUTES = re.compile(rf"\bat\s+{_N}\s+minutes?(?:,?\s+(?:and\s+)?{_N}(?:\s+seconds?)?)?\b", re.IGNORECASE)
_SECONDS = re.compile(rf"\bat\s+{_N}\s+seconds?\b", re.IGNORECASE)
_TOKEN = rf"(?:\d{{1,2}}|oh|{_WORD_NUMBER})"  # one number said on its own ("oh": zero)
_SAID = re.compile(rf"\bat\s+({_TOKEN}(?:(?:\s+|-){_TOKEN}){{1,3}})\b(?![.:]\d|(?:\s+|-)(?:\d|{_TOKEN}\b))",
                   re.IGNORECASE)
_AGO = re.compile(r"\s+ago\b", re.IGNORECASE)  # "two minutes ago" is a time before now (stream_times)


def _number(text: str) -> int:
    text = text.lower()
    if text.isdigit():
        return int(text)
    if text in ("a", "an", "oh"):  # "a minute"; "twelve oh five"
        return 0 if text == "oh" else 1
    if text in _UNITS:
        return _UNITS.index(text)
    tens, _, unit = re.sub(r"[\s-]+", " ", text).partition(" ")
    return _TENS[tens] + (_UNITS.index(unit) if unit else 0)


def _said(m: re.Match) -> str:
    """Digits or number words one by one ("0 0 6", "zero four thirteen", "3 45", "two fifty-four")."""
    tokens = re.findall(_TOKEN, m[1], re.IGNORECASE)
    values = [_number(t) for t in tokens]
    single = [len(t) == 1 if t.isdigit() else v < 10 for t, v in zip(tokens, values)]
    if all(single) and len(values) in (3, 4):  # "zero zero six", "0 4 1 3"
        digits = "".join(map(str, values))
        return _clock(int(digits[:-2]), int(digits[-2:]), m)
    if len(values) == 2 and not single[1]:  # "3 45", "two fifty-four", "ten twenty"
        return _clock(values[0], values[1], m)
    if single[0] and single[1] and len(values) == 3 and not single[2]:  # "zero four thirteen"
        return _clock(10 * values[0] + values[1], values[2], m)
    if not single[0] and all(single[1:]) and len(values) == 3:  # "twelve oh five"
        return _clock(values[0], 10 * values[1] + values[2], m)
    return m[0]


def _clock(minutes: int, seconds: int, m: re.Match) -> str:
    if seconds >= 60 or _AGO.match(m.string, m.end()):
        return m[0]
    return f"at {minutes:02d}:{seconds:02d}"


def clock_times(text: str) -> str:
    """`text` with each spoken-form time after "at" written "mm:ss" (the module docstring says which forms)."""
    text = _DOTTED.sub(lambda m: _clock(int(m[1]), int(m[2]), m), text)
    text = _RUN.sub(lambda m: _clock(int(m[1][:-2]), int(m[1][-2:]), m), text)
    text = _MINUTES.sub(lambda m: _clock(_number(m[1]), _number(m[2]) if m[2] else 0, m), text)
    text = _SECONDS.sub(lambda m: _clock(0, _number(m[1]), m), text)
    return _SAID.sub(_said, text)


_AGO_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40,
                 "fifty": 50, "sixty": 60}
_CLOCK = re.compile(r"\b(?:(\d+):)?(\d{1,2}):(\d{2})\b")
_AGO_TIME = re.compile(r"\b(\d+(?:\.\d+)?|" + "|".join(_AGO_NUMBERS) + r")\s+(second|sec|minute|min|hour)s?\s+ago\b",
                  re.IGNORECASE)
_UNIT_S = {"second": 1, "sec": 1, "minute": 60, "min": 60, "hour": 3600}


def stream_times(text: str, now_s: float) -> list[float]:
    """Stream times a question names: "at 03:12", "at 1:02:03", "two minutes ago", "30 seconds ago"."""
    times = [int(h or 0) * 3600 + int(m) * 60 + int(s) for h, m, s in _CLOCK.findall(text)]
    for amount, unit in _AGO_TIME.findall(text):
        n = _AGO_NUMBERS.get(amount.lower()) or float(amount)
        times.append(now_s - n * _UNIT_S[unit.lower()])
    return [float(t) for t in times if 0 <= t <= now_s]
