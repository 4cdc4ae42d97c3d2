"""What one client's text may cost the engine, counted in the model's tokens after templating, where the tokens
are spent: a question's prompt, the earlier turns given with it, a watch condition's probe, a narration prompt.

`user_text.clean` caps characters first (cheap, before any tokenizer runs); a character is one token or several
(an emoji is ~4 with a byte-level BPE), so the caps that bound a forward are these:

    check_question(adapter, text, cap)          # ValueError "question too long: N tokens, at most CAP ..."
    check_condition(adapter, probe_question, cap)
    fit_dialogue(adapter, question, turns, cap)  # the newest turns that fit in `cap` tokens, and how many were dropped

The settings are `max_question_tokens`, `max_dialogue_tokens` and `max_condition_tokens` (config.py); watches per
stream are capped by `max_watches` where triggers are added (triggers.TriggerSet).
"""

from __future__ import annotations

from collections.abc import Sequence

from streamvid.adapters.base import VideoLLMAdapter


def prompt_tokens(adapter: VideoLLMAdapter, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> int:
    """Tokens of the prompt a forward feeds for `question` after `dialogue` (the chat template's turns included)."""
    return int(adapter.token_ids(adapter.prompt(question, dialogue)).shape[-1])


def check_question(adapter: VideoLLMAdapter, text: str, cap: int, what: str = "question",
                   setting: str = "max-question-tokens") -> int:
    """The prompt's tokens for `text` asked alone; ValueError in one line when they are more than `cap`."""
    n = prompt_tokens(adapter, text)
    if n > cap:
        raise ValueError(f"{what} too long: {n} tokens, at most {cap} (--{setting}); make it shorter")
    return n


def check_condition(adapter: VideoLLMAdapter, probe_question: str, cap: int) -> int:
    """The tokens of a standing trigger's probe (asked on every chunk); ValueError past `cap`."""
    return check_question(adapter, probe_question, cap, "condition", "max-condition-tokens")


def fit_dialogue(adapter: VideoLLMAdapter, question: str, dialogue: Sequence[tuple[str, str]],
                 cap: int) -> tuple[list[tuple[str, str]], int]:
    """The newest turns of `dialogue` whose tokens in the prompt (beyond `question` asked alone) are at most `cap`,
    and the number of oldest turns dropped to get there."""
    turns = list(dialogue)
    if not turns:
        return turns, 0
    alone = prompt_tokens(adapter, question)
    dropped = 0
    while turns and prompt_tokens(adapter, question, turns) - alone > cap:
        turns.pop(0)
        dropped += 1
    return turns, dropped
