"""The sampling parameters of `POST /v1/chat/completions` (openai_api.py): what is honoured, what is refused.

    limits = chat_limits(body)          # Refused (400, naming the parameter) for what this server cannot do
    reply = Reply(limits)               # the answer's token pieces in, the text to send out, cut where asked
    reply.feed(piece) -> str            # the content to send now (text that may become a stop string waits)
    reply.finish(answer) -> str         # the rest, once the engine's answer is complete
    reply.finish_reason(answer, options), reply.usage(answer)

The engine decodes greedily, up to the server's `--max-new-tokens`. Honoured per request:
- `max_completion_tokens` / `max_tokens` (a whole number >= 1; both given: the smaller): the reply is the answer's
  first that many token pieces, finish_reason "length" when the answer went on past them;
- `stop` (a string or a list of at most 4 non-empty strings): the reply ends before the first one (finish_reason
  "stop"); streamed text that could be the start of one waits until it is known not to be.
The engine's decoding of the answer still runs to its own end (the reply is cut, the engine is not stopped).
Accepted at the values that mean greedy decoding, refused by name otherwise: `temperature` 0, `top_p` 1, `n` 1,
`presence_penalty` / `frequency_penalty` 0, `logprobs` false, `top_logprobs` 0, `logit_bias` {}, `tools` /
`functions` [], `tool_choice` / `function_call` "none" or "auto" (without tools), `response_format` {"type": "text"},
`modalities` ["text"]; `seed`: any whole number (greedy decoding gives the same answer on the same stream anyway).
`audio`, `prediction`, `reasoning_effort`, `verbosity`, `web_search_options` are refused unless null. Accepted and
without effect on the answer: `user`, `metadata`, `store`, `service_tier`, `prompt_cache_key`,
`safety_identifier`, `parallel_tool_calls`, `stream_options` (`include_usage` is honoured). Any other parameter is
refused by name.

`usage`: `prompt_tokens` is what the model read for the answer: the cached context (attention sinks, recalled
memory, the window of frames and speech: `prompt_tokens_details.cached_tokens`) plus the prompt fed after it (the
dialogue and the question); `completion_tokens` the token pieces of the reply; `total_tokens` their sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamvid.serve.errors import INVALID, ServeError

MAX_STOPS = 4  # stop strings, as OpenAI's

HARMLESS = frozenset({"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
                      "parallel_tool_calls", "stream_options"})
# parameter -> (the values that mean what this server does, how to say what it does)
GREEDY = {
    "temperature": ((0,), "this server decodes greedily; omit it or set it to 0"),
    "top_p": ((1,), "this server decodes greedily; omit it or set it to 1"),
    "n": ((1,), "this server gives one answer per question; omit it or set it to 1"),
    "presence_penalty": ((0,), "this server decodes greedily without penalties; omit it or set it to 0"),
    "frequency_penalty": ((0,), "this server decodes greedily without penalties; omit it or set it to 0"),
    "logprobs": ((False,), "this server does not return log probabilities; omit it or set it to false"),
    "top_logprobs": ((0,), "this server does not return log probabilities; omit it or set it to 0"),
    "logit_bias": (({},), "this server decodes greedily without biases; omit it or send {}"),
    "tools": (([],), "this server does not call tools; omit it or send []"),
    "functions": (([],), "this server does not call functions; omit it or send []"),
    "tool_choice": (("none", "auto"), 'this server does not call tools; omit it or set it to "none"'),
    "function_call": (("none", "auto"), 'this server does not call functions; omit it or set it to "none"'),
    "response_format": (({"type": "text"},), 'this server answers in plain text; omit it or send {"type": "text"}'),
    "modalities": ((["text"],), 'this server answers in text (speech: POST /v1/audio/speech); omit it or send '
                                '["text"]'),
    "audio": ((), "this server answers in text (speech: POST /v1/audio/speech); omit it"),
    "prediction": ((), "this server does not take predicted outputs; omit it"),
    "reasoning_effort": ((), "this server's model has no reasoning setting; omit it"),
    "verbosity": ((), "this server's model has no verbosity setting; omit it"),
    "web_search_options": ((), "this server does not search the web; omit it"),
}


def unsupported(message: str) -> ServeError:
    return ServeError(message, 400, INVALID, "unsupported_parameter")


def invalid(message: str) -> ServeError:
    return ServeError(message, 400, INVALID, "invalid_value")


def same(value, allowed) -> bool:
    """`value` is one of `allowed` (a number equal to one, bools only as bools)."""
    for a in allowed:
        if isinstance(a, bool) or isinstance(value, bool):
            if value is a:
                return True
        elif isinstance(a, (int, float)):
            if isinstance(value, (int, float)) and value == a:
                return True
        elif value == a:
            return True
    return False


@dataclass(frozen=True)
class Limits:
    max_tokens: int | None = None  # token pieces of the reply at most (None: the engine's own limit)
    stop: tuple[str, ...] = ()


def whole(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid(f"{name} must be a whole number >= 1, got {str(value)[:40]!r}")
    return value


def chat_limits(params: dict) -> Limits:
    """The limits `params` (the request's fields besides those the route reads itself: model, messages, stream,
    stream_id, stream_options) set on the reply; ServeError (400, naming the parameter) for one this server cannot
    honour or does not know."""
    caps = []
    stop: tuple[str, ...] = ()
    for name, value in params.items():
        if name in HARMLESS:
            continue
        if name in ("max_tokens", "max_completion_tokens"):
            if value is not None:
                caps.append(whole(value, name))
        elif name == "stop":
            stop = stops(value)
        elif name == "seed":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise invalid(f"seed must be a whole number, got {str(value)[:40]!r}")
        elif name in GREEDY:
            allowed, how = GREEDY[name]
            if value is not None and not same(value, allowed):
                if name in ("tool_choice", "function_call") and value == "auto" and (params.get("tools") or
                                                                                      params.get("functions")):
                    continue  # (the tools themselves are refused)
                raise unsupported(f"{name} {str(value)[:40]} is not supported: {how}")
        else:
            raise unsupported(f"unknown parameter {name[:60]!r}: this server does not take it; omit it")
    return Limits(min(caps) if caps else None, stop)


def stops(value) -> tuple[str, ...]:
    if value is None:
        return ()
    got = [value] if isinstance(value, str) else value
    if not isinstance(got, list) or not all(isinstance(s, str) and s for s in got) or len(got) > MAX_STOPS:
        raise invalid(f"stop must be a non-empty string or a list of at most {MAX_STOPS} of them")
    return tuple(got)


class Reply:
    """The text a chat completion sends: the answer's token pieces, stripped as the engine strips an answer, cut at
    `limits.max_tokens` pieces or before the first stop string."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.raw = ""  # the pieces taken, joined
        self.sent = ""  # the content sent so far
        self.pieces = 0  # token pieces taken
        self.over = False  # a piece came after the cap was reached: the answer went on past it
        self.reason: str | None = None  # "stop" / "length" once the reply is cut

    @property
    def capped(self) -> bool:
        return self.limits.max_tokens is not None and self.pieces >= self.limits.max_tokens

    def feed(self, piece: str) -> str:
        """The content to send after the token piece `piece` ("" when nothing is to be sent yet)."""
        if self.reason is not None:
            return ""
        if self.capped:
            self.over = True
            return ""
        self.pieces += 1
        self.raw += piece
        text = self.raw.lstrip()
        at = self._stop_at(text)
        if at is not None:
            self.reason = "stop"
            return self._send(text[:at].rstrip())
        if self.capped:
            return self._send(text.rstrip())
        return self._send(text[:len(text) - self._held(text)].rstrip())

    def finish(self, answer: dict) -> str:
        """The rest of the content once `answer` (the engine's, its "text" stripped) is complete."""
        if self.reason is None and not self.capped:
            text = str(answer.get("text") or "")  # (an acknowledgement or "nothing seen" comes whole, no pieces)
            at = self._stop_at(text)
            if at is not None:
                self.reason = "stop"
                text = text[:at].rstrip()
            if text == self.sent:
                return ""
            out = text[len(self.sent):] if text.startswith(self.sent) else text
            self.sent = text
            return out
        if self.reason is None and (self.over or int(answer.get("tokens") or 0) > self.pieces):
            self.reason = "length"
        return ""

    def finish_reason(self, answer: dict, options) -> str:
        if self.reason is not None:
            return self.reason
        limit = options.max_new_tokens
        return "length" if limit and (answer.get("tokens") or 0) >= limit else "stop"

    def usage(self, answer: dict) -> dict:
        return usage(answer, self.pieces if self.reason is not None else None)  # (cut: the pieces sent from)

    def _send(self, text: str) -> str:
        if text.startswith(self.sent) and len(text) > len(self.sent):
            out, self.sent = text[len(self.sent):], text
            return out
        return ""

    def _stop_at(self, text: str) -> int | None:
        found = [i for i in (text.find(s) for s in self.limits.stop) if i >= 0]
        return min(found) if found else None

    def _held(self, text: str) -> int:
        """How many characters at the end of `text` could be the start of a stop string (they wait)."""
        longest = 0
        for s in self.limits.stop:
            for n in range(min(len(s) - 1, len(text)), longest, -1):
                if text.endswith(s[:n]):
                    longest = n
                    break
        return longest


def usage(answer: dict, completion: int | None = None) -> dict:
    """OpenAI's usage object for `answer` (the engine's): `completion` token pieces when the reply was cut."""
    prompt, context = int(answer.get("prompt_tokens") or 0), int(answer.get("context_tokens") or 0)
    tokens = int(answer.get("tokens") or 0) if completion is None else min(completion, int(answer.get("tokens") or 0))
    return {"prompt_tokens": prompt + context, "completion_tokens": tokens, "total_tokens": prompt + context + tokens,
            "prompt_tokens_details": {"cached_tokens": context, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
