"""Samples (`data._Data.sample`) into model inputs laid out like the engine's answer context: sinks (system prompt),
the retrieved blocks in time order, the window, then the engine's prompt (`adapter.prompt(question, dialogue)`),
each video chunk its own <|vision_start|>...<|vision_end|> group with Qwen's 3-D positions. Each block is
computed from what the engine computed it from (`engine_mask`): a chunk from memory from the sinks alone, a window
chunk or a speech block from the sinks and the window of its time, for which the 8 s before the window are laid in
as "ghosts" that the prompt and the answer do not see.

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
        cfg = data.cfg
        self.window_s = cfg.window_blocks * cfg.frames_per_chunk / cfg.fps  # the engine's window, in seconds
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
        word_looks, answer_looks, read = [], [], []
        laid = [self._laid(s) for s in samples]  # (kind, start time, chunk or speech block) in context order
        vision = iter(self.data.tokens_for([(s["ti"], x) for s, row in zip(samples, laid) for _, _, x in row
                                            if not isinstance(x, str)]))
        segments = []  # per row: (first token, end, start time, kind) of each block
        for si, s in enumerate(samples):
            ids = list(self.sink_ids)
            first_span = len(chunk_spans)
            blocks = []  # (position, text) of the speech blocks
            segments.append([])
            for kind, t, frames in laid[si]:
                begin = len(ids)
                if isinstance(frames, str):  # a speech block: its line of text, as the engine encodes it
                    ids += tok.encode(frames, add_special_tokens=False)
                    if kind != "ghost":
                        blocks.append((begin, frames))
                else:
                    tokens = next(vision)
                    n = len(tokens)
                    if kind != "ghost":  # (ghosts are not read by the answer: no looks, no contrastive pairs)
                        chunk_spans.append((si, len(ids) + 1, len(ids) + 1 + n))
                        chunk_meta.append((s["ti"], frames))
                        read.append(tokens)
                    ids += [a.vision_start_id] + [a.video_pad_id] * n + [a.vision_end_id]
                    embeds.append(tokens)
                    grids.append(self.data.chunk_grid)
                segments[-1].append((begin, len(ids), t, kind))
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
        mask = torch.stack([engine_mask(seg, len(r), length, self.window_s) for seg, r in zip(segments, rows)])
        mask = torch.zeros(mask.shape, dtype=torch.float32).masked_fill_(~mask, torch.finfo(torch.float32).min)
        pos = torch.zeros((3, len(rows), length), dtype=torch.long)
        grid_all = torch.cat(grids)
        g = 0
        for i, (r, lab) in enumerate(zip(rows, labels)):
            ids = torch.tensor([r])
            n_chunks = int((ids == a.vision_start_id).sum())
            p = self._positions(r, segments[i], grid_all[g:g + n_chunks])
            g += n_chunks
            input_ids[i, :len(r)] = ids[0]
            label_t[i, :len(r)] = torch.tensor(lab)
            pos[:, i, :len(r)] = p
        questions = [tok.encode(s["question"], add_special_tokens=False) for s in samples]  # the last turn
        return {"input_ids": input_ids, "labels": label_t, "attention_mask": mask[:, None], "position_ids": pos,
                "video_embeds": torch.cat(embeds), "chunk_embeds": torch.cat(read), "video_grid_thw": grid_all,
                "chunk_spans": chunk_spans, "chunk_meta": chunk_meta, "questions": questions, "samples": samples,
                "word_looks": word_looks, "answer_looks": answer_looks}

    def _laid(self, s: dict) -> list[tuple[str, float, list[int] | str]]:
        """A sample's blocks in context order: the retrieved ones, the ghosts (the window before the window: what
        the engine encoded the window's first blocks on, which nothing after the window reads), the window."""
        r = s["retrieved"]
        out = [("memory speech" if isinstance(x, str) else "memory chunk", t, x)
               for t, x in zip(s["starts"][:r], s["chunks"][:r])]
        out += [("ghost", t, x) for t, x in s["ghosts"]]
        return out + [("window", t, x) for t, x in zip(s["starts"][r:], s["chunks"][r:])]

    def _positions(self, row: list[int], segments: list, grids: torch.Tensor) -> torch.Tensor:
        """The row's 3-D positions: contiguous over everything but the ghosts (as the engine lays out an answer's
        context), and the ghosts at the positions just before the window, where the engine had them when it
        encoded the window's first blocks (they overlap the retrieved blocks', which neither side sees)."""
        a = self.a

        def rope(ids: list[int], grid: torch.Tensor) -> torch.Tensor:
            t = torch.tensor([ids])
            n = int((t == a.vision_start_id).sum())
            p, _ = a.model.model.get_rope_index(t, mm_token_type_ids=(t == a.video_pad_id).int() * 2,
                                                video_grid_thw=grid[:n], second_per_grid_ts=torch.ones(n))
            return p[:, 0]

        out = torch.zeros((3, len(row)), dtype=torch.long)
        ghosts = [k for b, e, _, kind in segments if kind == "ghost" for k in range(b, e)]
        hidden = set(ghosts)
        chunks = [k for k, t in enumerate(row) if t == a.vision_start_id]  # each chunk's first token, in order
        keep = [k for k in range(len(row)) if k not in hidden]
        out[:, keep] = rope([row[k] for k in keep], grids[[i for i, k in enumerate(chunks) if k not in hidden]])
        if ghosts:
            first = next(b for b, _, _, kind in segments if kind == "window")  # the window's first token
            n_sinks = len(self.sink_ids)
            p = rope([row[k] for k in [*range(n_sinks), *ghosts, first]],
                     grids[[i for i, k in enumerate(chunks) if k in hidden]])
            out[:, ghosts] = p[:, n_sinks:-1] + (out[:, first] - p[:, -1])[:, None]
        return out

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


def engine_mask(segments: list[tuple[int, int, float, str]], n: int, length: int, window_s: float) -> torch.Tensor:
    """Which tokens each token of a row sees, (length, length) bool, so that every block's keys and values are
    computed from what the engine computed them from (ingest.py):
    - a chunk retrieved from memory ("memory chunk"): from the sinks alone (memory_encoding "sinks", what memory
      keeps of a streamvid-trained model's chunks);
    - a retrieved speech block ("memory speech"): from the sinks and the retrieved blocks of the `window_s` before it
      (what is here of the window it was encoded on);
    - a window block, or a ghost (a block of the window before the window): from the sinks and the window and
      ghost blocks of the `window_s` before it, never a retrieved one (its window held that block's window form,
      the ghost).
    The sinks, the prompt and the answer see everything before them but the ghosts, which are not in the
    engine's answer context. segments: (first token, end, start time in the stream, kind) of the blocks in
    context order; n: the row's tokens (the rest is padding, which sees itself only)."""
    seen = torch.ones(length, length, dtype=torch.bool).tril_()
    seen[n:] = False
    seen[range(n, length), range(n, length)] = True
    for i, (a, b, t, kind) in enumerate(segments):
        for a0, b0, t0, kind0 in segments[:i]:
            near = t0 >= t - window_s - 1e-6
            if kind == "memory chunk" or not near or (kind0 in ("ghost", "window")) != (kind in ("ghost", "window")):
                seen[a:b, a0:b0] = False
    after = segments[-1][1] if segments else n
    for a0, b0, _, kind0 in segments:
        if kind0 == "ghost":
            seen[after:n, a0:b0] = False
    return seen


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
