"""LLaVA-NeXT-Video (`LlavaNextVideoForConditionalGeneration`): a CLIP vision tower, a Llama (Vicuna) language
model with 1-D RoPE and a sentencepiece tokenizer, and a spatial pooling of each frame's patch grid
(`vision_resampler`, stride 2). Chunks are encoded as in `llava_onevision.LlavaVideoAdapter` (no newline feature).

The chat format is its template's: `SYSTEM USER: <video>\\nQUESTION ASSISTANT: ANSWER USER: ...`; an answer ends with
`</s>` (eos).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from streamvid.adapters.hf import SYSTEM_PROMPT
from streamvid.adapters.llava_onevision import LlavaVideoAdapter


class LlavaNextVideoAdapter(LlavaVideoAdapter):
    model_types = ("llava_next_video",)

    @property
    def sink_text(self) -> str:
        return f"{SYSTEM_PROMPT} USER: "

    def prompt(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str:
        turns = "".join(f"{q} ASSISTANT: {a} USER: " for q, a in dialogue)
        return f"\n{turns}{question} ASSISTANT:"

    def token_ids(self, text: str) -> torch.Tensor:
        """Token ids of `text` where it stands in the conversation. Sentencepiece marks a word start with `▁` and
        gives one to the start of whatever it encodes, where the whole conversation tokenized at once has none
        (after `<video>`, before `\\n`): a segment that continues the context is encoded after a special token,
        which is then dropped. The sink opens the conversation: it gets `<s>` if the tokenizer adds one."""
        if text == self.sink_text:
            return torch.tensor([self.tokenizer(text)["input_ids"]])
        ids = self.tokenizer.encode(self.tokenizer.unk_token + text, add_special_tokens=False)
        return torch.tensor([ids[1:]])
