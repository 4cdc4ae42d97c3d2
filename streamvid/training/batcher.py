"""Samples (`data._Data.sample`) into model inputs laid out like the engine's answer context: sinks (system prompt),
the retrieved blocks in time order, the window, then the engine's prompt (`adapter.prompt(question, dialogue)`),
each video chunk its own <|vision_start|>...<|vision_end|> group with Qwen's 3-D positions.

Only the current question's answer is labelled, and only its words and answer are taught where to look
(`attention_loss`, in two hops): at every colour or shape word of the question, two heads of decoder layer 1 attend
to the vision tokens that show that colour or shape (in the newest block for a question about now, in the retrieved
blocks for one about the past); at the position that predicts the answer's first token, two heads of layer 2
attend to those words (to the objects' vision tokens themselves for a question that names nothing, such as a
count). An answer that lists objects ("purple hexagon, red star") is taught the same hops at each listed colour word,
which predicts that object's shape. The earlier turns are text the answer may read, about other moments: their
answers are not targets, and nothing teaches their words to look at the frames of now."""

from __future__ import annotations

import itertools
import re

import numpy as np
import torch

from streamvid.adapters.qwen2_5_vl import QwenVLAdapter
from streamvid.synth.world import COLOURS, SHAPES

from .config import REALTIME, SPEECH


class Batcher:
    """Turns samples into model inputs laid out like the engine's answer context."""

    def __init__(self, adapter: QwenVLAdapter, data):
        self.a = adapter
        self.data = data
        tok = adapter.tokenizer
        self.sink_ids = tok.encode(adapter.sink_text, add_special_tokens=False)
        self.end_id = tok.convert_tokens_to_ids("<|im_end|>")
        self.pad_id = tok.convert_tokens_to_ids("<|endoftext|>")
        # first token of " red", ..., " circle", ...: the column of each attribute word in the cell labels
        self.word_column = {tok.encode(" " + w, add_special_tokens=False)[0]: i
                            for i, w in enumerate([*COLOURS, *SHAPES])}
        # ... and in an answer, whose first word has no space before it
        self.answer_column = {**self.word_column, **{tok.encode(w, add_special_tokens=False)[0]: i
                                                     for i, w in enumerate([*COLOURS, *SHAPES])}}

    def prompt_ids(self, s: dict) -> tuple[list[int], list[int]]:
        """The engine's prompt for the sample, `adapter.prompt(question, dialogue)`, as (the earlier turns' ids,
        the question's ids): special tokens split the text, so the two tokenize as the whole prompt does."""
        a, tok = self.a, self.a.tokenizer
        question = a.prompt(s["question"])
        dialogue = [(q, ans) for q, ans, _, _ in s["dialogue"]]
        earlier = a.prompt(s["question"], dialogue)[:-len(question)] if dialogue else ""
        return tok.encode(earlier, add_special_tokens=False), tok.encode(question, add_special_tokens=False)

    def build(self, samples: list[dict]) -> dict:
        a, tok = self.a, self.a.tokenizer
        rows, labels, embeds, grids, chunk_spans, chunk_meta = [], [], [], [], [], []
        word_looks, answer_looks = [], []
        vision = iter(self.data.tokens_for([(s["ti"], frames) for s in samples for frames in s["chunks"]
                                            if not isinstance(frames, str)]))
        for si, s in enumerate(samples):
            ids = list(self.sink_ids)
            first_span = len(chunk_spans)
            blocks = []  # (position, text) of the speech blocks
            for frames in s["chunks"]:
                if isinstance(frames, str):  # a speech block: its line of text, as the engine encodes it
                    blocks.append((len(ids), frames))
                    ids += tok.encode(frames, add_special_tokens=False)
                    continue
                tokens = next(vision)
                n = len(tokens)
                chunk_spans.append((si, len(ids) + 1, len(ids) + 1 + n))
                chunk_meta.append((s["ti"], frames))
                ids += [a.vision_start_id] + [a.video_pad_id] * n + [a.vision_end_id]
                embeds.append(tokens)
                grids.append(self.data.chunk_grid)
            spans = chunk_spans[first_span:]
            earlier, prompt = self.prompt_ids(s)
            answer_ids = tok.encode(s["answer"], add_special_tokens=False) + [self.end_id]
            ids += earlier
            start = len(ids)
            lab = [-100] * (start + len(prompt)) + answer_ids
            family = s["family"]
            if family in SPEECH:  # read from the speech blocks' words: no look at the frames is taught
                words, copies = self._speech_looks(s, blocks, start, start + len(prompt) - 1)
                word_looks += [(si, p, t) for p, t in words]
                answer_looks += [(si, p, t) for p, t in copies]
                ids += prompt + answer_ids
                rows.append(ids)
                labels.append(lab)
                continue
            words = [i for i, t in enumerate(prompt) if t in self.word_column]  # colour and shape words
            for i in words:
                if cells := self._look_at(s, spans, family, [self.word_column[prompt[i]]]):
                    word_looks.append((si, start + i, cells))
            words = [start + i for i in words]
            answer_targets = words or self._look_at(s, spans, family, [])
            if answer_targets:
                answer_looks.append((si, start + len(prompt) - 1, answer_targets))
            # an answer that lists objects ("red star, yellow triangle"): at each listed colour, which predicts its
            # object's shape, layer 1 looks at the object and layer 2 at that colour word itself
            at = start + len(prompt)
            for j, (t, nxt) in enumerate(itertools.pairwise(answer_ids)):
                column = self.answer_column.get(t, len(COLOURS))
                lists = column < len(COLOURS) and self.answer_column.get(nxt, -1) >= len(COLOURS)
                if lists and (cells := self._look_at(s, spans, family, [column])):
                    word_looks.append((si, at + j, cells))
                    answer_looks.append((si, at + j, [at + j]))
            ids += prompt + answer_ids
            rows.append(ids)
            labels.append(lab)
        length = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), length), self.pad_id)
        label_t = torch.full((len(rows), length), -100)
        mask = torch.zeros((len(rows), length), dtype=torch.long)
        pos = torch.zeros((3, len(rows), length), dtype=torch.long)
        grid_all = torch.cat(grids)
        g = 0
        for i, (r, lab) in enumerate(zip(rows, labels)):
            ids = torch.tensor([r])
            types = (ids == a.video_pad_id).int() * 2
            n_chunks = int((ids == a.vision_start_id).sum())
            p, _ = a.model.model.get_rope_index(ids, mm_token_type_ids=types, video_grid_thw=grid_all[g:g + n_chunks],
                                                second_per_grid_ts=torch.ones(n_chunks))
            g += n_chunks
            input_ids[i, :len(r)] = ids[0]
            label_t[i, :len(r)] = torch.tensor(lab)
            mask[i, :len(r)] = 1
            pos[:, i, :len(r)] = p[:, 0]
        questions = [tok.encode(s["question"], add_special_tokens=False) for s in samples]  # the last turn
        return {"input_ids": input_ids, "labels": label_t, "attention_mask": mask, "position_ids": pos,
                "video_embeds": torch.cat(embeds), "video_grid_thw": grid_all,
                "chunk_spans": chunk_spans, "chunk_meta": chunk_meta, "questions": questions, "samples": samples,
                "word_looks": word_looks, "answer_looks": answer_looks}

    def _speech_looks(self, s: dict, blocks: list[tuple[int, str]], start: int, at: int):
        """Where an answer about what was said reads from: at the position that predicts each answer token (and the
        end of the turn), the speech block's token it copies (the line's words, or for "when" its "mm:ss"); for a
        quoted word, each of its question tokens looks at the same characters in that line. (position, targets)
        lists for layer 2 (copies) and layer 1 (words); empty where the line is not in the context."""
        answer = s["answer"]
        if s["family"] == "when_said":
            found = [(p, t, 2) for p, t in blocks if t.startswith(f"\n[{answer}]")]
        else:
            found = [(p, t, t.index("speech: ") + 8) for p, t in blocks if t[t.index("speech: ") + 8:-1] == answer]
        if not found:
            return [], []
        p0, text, src = found[-1]
        spans = self._offsets(text)

        def token_at(c: int) -> int | None:
            return next((p0 + j for j, (x, y) in enumerate(spans) if x <= c < y), None)

        copies = []
        for i, c in enumerate([x for x, _ in self._offsets(answer)] + [len(answer)]):
            if (t := token_at(src + c)) is not None:
                copies.append((at + i, [t]))
        words = []
        if s["family"] == "when_said" and (m := re.search(r"'([^']+)'", s["question"])):
            prompt = self.a.prompt(s["question"])
            q0 = prompt.index(m.group(0)) + 1
            line = text.lower()
            if (w0 := line.find(m.group(1).lower(), line.index("speech: "))) >= 0:
                for j, (x, _) in enumerate(self._offsets(prompt)):
                    if q0 <= x < q0 + len(m.group(1)) and (t := token_at(w0 + x - q0)) is not None:
                        words.append((start + j, [t]))
        return words, copies

    def _offsets(self, text: str) -> list[tuple[int, int]]:
        return self.a.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]

    def _look_at(self, s: dict, spans: list[tuple[int, int, int]], family: str, cols: list[int]) -> list[int]:
        """Token positions of the vision tokens that show the attributes `cols` (any object, for none), in the
        newest block for a question about now, in every block for one about the past (the retrieved blocks; a
        timed question has no window)."""
        chunks = list(zip(spans, [c for c in s["chunks"] if not isinstance(c, str)]))
        if family in REALTIME:
            chunks = chunks[-1:]
        out = []
        for (_, a, b), frames in chunks:
            attributes = self.data.cell_attributes(s["ti"], frames)
            hit = attributes[:, cols].any(1) if cols else attributes.any(1)
            out += [a + int(i) for i in np.flatnonzero(hit) if a + int(i) < b]
        return out


def forward(model, batch: dict, **kw):
    """The model's output over a batch from `Batcher.build`: its vision tokens in the video slots."""
    ids = batch["input_ids"]
    embeds = model.get_input_embeddings()(ids)
    slots = (ids == model.config.video_token_id).unsqueeze(-1)
    embeds = embeds.masked_scatter(slots, batch["video_embeds"].to(embeds.dtype))
    return model(inputs_embeds=embeds, attention_mask=batch["attention_mask"], position_ids=batch["position_ids"],
                 **kw)


def attention_loss(attentions: torch.Tensor, looks: list[tuple[int, int, list[int]]]) -> torch.Tensor:
    """-log of the attention mass that heads 0 and 1 put on the vision tokens an answer has to read, at the position
    that predicts the answer's first token. attentions: (batch, heads, L, L)."""
    if not looks:
        return attentions.sum() * 0.0
    losses = [-torch.log(attentions[row, :2, pos, targets].sum(-1) + 1e-6) for row, pos, targets in looks]
    return torch.cat(losses).mean()
