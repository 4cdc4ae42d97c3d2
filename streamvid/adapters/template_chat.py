"""The conversation text of a family whose chat text is taken from its checkpoint's chat template, rendered by its
own processor (`processor.apply_chat_template`): SmolVLM2 and InternVL3.5.

At load, the template is rendered for the system prompt and one user turn holding a video and then a question; the
text before the video is the sink text, the text between the video and the question is the video placeholder the
processor expands, and `prompt` is the text from the question on of the same conversation rendered with the earlier
turns. Nothing of the turn format is written here.
"""

from __future__ import annotations

from collections.abc import Sequence

from streamvid.adapters.hf import SYSTEM_PROMPT

PROBE_QUESTION = "What is happening?"


def messages(question: str, dialogue: Sequence[tuple[str, str]] = ()) -> list[dict]:
    """The system prompt; a user turn with the video, then the first question; earlier answers and questions."""
    turns = [*[t for pair in dialogue for t in pair], question]
    out = [{"role": "system", "content": SYSTEM_PROMPT},
           {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": turns[0]}]}]
    for i, text in enumerate(turns[1:]):
        out.append({"role": "assistant" if i % 2 == 0 else "user", "content": text})
    return out


class TemplateChat:
    """Mixin for an `HFVideoAdapter`: `sink_text`, `video_text` and `prompt` from the processor's chat template.
    `read_template(model)` is called once the processor is loaded."""

    processor: object
    prompt_prefix = ""  # text the processor writes after a video's frames (SmolVLM's outtro), put before the prompt

    def read_template(self, model: str) -> None:
        video_token = getattr(self.processor, "video_token", None) or "<video>"
        try:
            rendered = self.render(PROBE_QUESTION)
        except (ValueError, TypeError, AttributeError) as e:  # no chat template, or one that cannot render a video
            raise ValueError(f"cannot load model {model!r}: its chat template does not render a video turn "
                             f"({str(e).splitlines()[0]})") from e
        at = rendered.find(video_token)
        ask = rendered.find(PROBE_QUESTION, at + 1)
        if at < 0 or ask < 0:
            raise ValueError(f"cannot load model {model!r}: its chat template writes no {video_token} before the "
                             "question of a user turn")
        self._sink_text = rendered[:at]
        self.video_text = rendered[at:ask]  # the placeholder the processor expands into a chunk's tokens

    def render(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str:
        return self.processor.apply_chat_template(messages(question, dialogue), add_generation_prompt=True,
                                                  tokenize=False)

    @property
    def sink_text(self) -> str:
        return self._sink_text

    def prompt(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str:
        """The template's text after the video: the first question, earlier turns, the question, the answer
        header."""
        rendered = self.render(question, dialogue)
        head = self._sink_text + self.video_text
        if not rendered.startswith(head):
            raise ValueError("the chat template renders this conversation with another opening")
        return self.prompt_prefix + rendered[len(head):]
