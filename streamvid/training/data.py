"""Training samples from ShapesWorld timelines, laid out as the engine lays out an answer.

A sample is a moment `now` of a timeline (a chunk boundary on the engine's grid: chunk c holds frames c*fpc ...),
the chunks of its context and the dialogue of its prompt:
- chunks: what sits in the "retrieved" slot imitates the engine. For a memory question, some of the blocks that
  show the evidence plus older distractors; a question about now gets the window alone (the engine searches memory
  for questions about the past only, `scope.about_now`); a question that names a time gets the blocks at that time
  and no window, as the engine answers it.
- dialogue: the engine's prompt carries the stream's last `dialogue_turns` (question, answer) pairs
  (`Reasoning.begin`), and those were asked at EARLIER moments: each earlier turn here is a question drawn at an
  earlier time of the same stream with the answer that was right then (often the same question about a scene that
  has changed since), so answers about now must follow the frames, not the dialogue. A question that names a time,
  and a trigger probe, is asked without dialogue, as the engine asks it. Samples mix 0, 1 and 2 earlier turns.

Frames go through the same path as in the engine: each timeline is written as H.264 and decoded with `FileSource`,
so the model learns from what the engine will see (compression included)."""

from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from streamvid.language.scope import about_now
from streamvid.media.file_source import FileSource
from streamvid.synth.questions import QA, describe, frames_show, mentions, sample_qa
from streamvid.synth.world import CELL_PX, COLOURS, SHAPES, Timeline, generate, shape_mask, write_mp4

from .config import ALONE, ASKED_ALOUD, DIALOGUE_FAMILIES, N_EVAL_TIMELINES, PROBE_TEMPLATE, SPEECH, TrainConfig
from .speech import SOUND_P, Line, as_speech, line_of, lines_for, slot
from .vision import video_inputs

NAMES = (*SHAPES, *COLOURS)  # what a memory question names: a shape, or a colour


class TrainingData:
    """Timelines, their decoded frames, their chunks' vision tokens, and samples drawn from them."""

    def __init__(self, cfg: TrainConfig, rng: np.random.Generator):
        self.cfg = cfg
        self.rng = rng
        seeds = [cfg.seed * 100_000 + i for i in range(cfg.n_timelines)]
        seeds += [cfg.seed * 100_000 + 50_000 + i for i in range(N_EVAL_TIMELINES)]  # held out: progress checks
        self.timelines = [generate(s, cfg.minutes * 60, cfg.fps, cfg.frame_px // CELL_PX) for s in seeds]
        self.train_ids = list(range(cfg.n_timelines))
        self.eval_ids = list(range(cfg.n_timelines, len(seeds)))
        # what each stream says (none on a silent one; the held-out streams all have sound), and its gold track
        self.lines: list[list[Line]] = [lines_for(tl, rng) if i in self.eval_ids or rng.random() < SOUND_P else []
                                        for i, tl in enumerate(self.timelines)]
        self.timelines = [dataclasses.replace(tl, speech=as_speech(lines)) if lines else tl
                          for tl, lines in zip(self.timelines, self.lines)]
        with tempfile.TemporaryDirectory(prefix="streamvid-train-") as tmp:
            self.frames = [self._decode(tl, Path(tmp) / f"{i}.mp4") for i, tl in enumerate(self.timelines)]
        names = list(cfg.families)
        w = np.array([cfg.families[n] for n in names], dtype=float)
        self.families, self.family_p = names, w / w.sum()
        self._cells: dict[tuple[int, int], np.ndarray] = {}
        self._names: dict[int, np.ndarray] = {}
        self.merger = None  # the tower's merger, while it trains: tokens are made from `pre` then
        self.pre: list[torch.Tensor] | None = None
        # question text -> its heard forms (training/heard.py): a user question is asked in one of them with
        # probability cfg.heard_p
        self.heard: dict[str, list[str]] = {}

    def _decode(self, tl: Timeline, path: Path) -> np.ndarray:
        write_mp4(tl, path, size=self.cfg.frame_px)
        source = FileSource(path, fps=self.cfg.fps)
        frames = np.stack([f.image for f in iter(source.read, None)])  # (n_frames, H, W, 3) uint8
        source.close()
        if len(frames) != tl.n_frames:
            raise RuntimeError(f"decoded {len(frames)} frames of {tl.n_frames} for timeline {tl.seed}")
        return frames

    def frame(self, ti: int, k: int) -> np.ndarray:
        return self.frames[ti][k]

    # ---- vision tokens -----------------------------------------------------------------------------------
    @torch.no_grad()
    def encode_chunks(self, model, processor, batch: int = 64, merger_inputs: bool = False) -> None:
        """Run the (then frozen) vision tower once over every chunk of every timeline, on the engine's chunk grid
        and through the engine's processor call, so the language model trains on exactly the vision tokens the
        engine will feed it, without paying for the tower at every step. With `merger_inputs` also keep what the
        tower's last block gives its merger (per chunk, its patches in the tower's order), so the merger can train
        on: `chunk_tokens` then makes each chunk's tokens from those."""
        fpc = self.cfg.frames_per_chunk
        self.tokens, self.pre = [], [] if merger_inputs else None
        for frames in self.frames:
            chunks = [frames[c * fpc:(c + 1) * fpc] for c in range(len(frames) // fpc)]
            out, pre = [], []
            for i in range(0, len(chunks), batch):
                video = video_inputs(processor, chunks[i:i + batch])
                res = model.model.get_video_features(video["pixel_values_videos"], video["video_grid_thw"],
                                                     return_dict=True)
                out += list(res.pooler_output)
                if merger_inputs:
                    pre += list(res.last_hidden_state.split(len(res.last_hidden_state) // len(res.pooler_output)))
            self.tokens.append(torch.stack(out))  # (chunks, tokens per chunk, hidden)
            if merger_inputs:
                self.pre.append(torch.stack(pre))  # (chunks, patches per chunk, tower hidden)
        self.chunk_grid = video["video_grid_thw"][:1].clone()
        if merger_inputs:
            from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import get_vision_window_index

            visual = model.model.visual
            window, _ = get_vision_window_index(self.chunk_grid, visual.spatial_merge_size, visual.window_size,
                                                visual.patch_size)
            self.merge_order = torch.argsort(window)  # the tower's order of merged tokens -> the grid's

    def merged(self, ti: int, chunks) -> torch.Tensor:
        """(len(chunks), tokens per chunk, hidden): the chunks' vision tokens made by the training merger."""
        pre = self.pre[ti][chunks]
        n = len(pre)
        return self.merger(pre.reshape(-1, pre.shape[-1])).view(n, -1, self.tokens[ti].shape[-1])[:, self.merge_order]

    def chunk_frames(self, c: int) -> list[int]:
        """Frame indices of the engine's chunk c (chunks start at frame 0)."""
        fpc = self.cfg.frames_per_chunk
        return list(range(c * fpc, (c + 1) * fpc))

    def n_chunks(self, ti: int) -> int:
        return len(self.tokens[ti])

    def chunk_tokens(self, ti: int, frames: list[int]) -> torch.Tensor:
        """The vision tokens of the engine's chunk that starts at frame `frames[0]` (after `encode_chunks`)."""
        c = frames[0] // self.cfg.frames_per_chunk
        return self.tokens[ti][c] if self.merger is None else self.merged(ti, [c])[0]

    def tokens_for(self, chunks: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
        """`chunk_tokens` of each (timeline, frames), the merger run once per timeline."""
        if self.merger is None:
            return [self.chunk_tokens(ti, frames) for ti, frames in chunks]
        fpc = self.cfg.frames_per_chunk
        out: list[torch.Tensor | None] = [None] * len(chunks)
        for ti in dict.fromkeys(ti for ti, _ in chunks):
            at = [i for i, (t, _) in enumerate(chunks) if t == ti]
            for i, tokens in zip(at, self.merged(ti, [chunks[i][1][0] // fpc for i in at])):
                out[i] = tokens
        return out

    def all_tokens(self, ti: int) -> torch.Tensor:
        """(chunks, tokens, hidden) of every chunk of the timeline, with the merger as it is now."""
        return self.tokens[ti] if self.merger is None else self.merged(ti, slice(None))

    # ---- what the cells show -----------------------------------------------------------------------------
    def cell_attributes(self, ti: int, frames: list[int]) -> np.ndarray:
        """(cells, colours + shapes) bool: which colours and shapes cover more than 5% of each merged-token cell on
        any of the chunk's frames; cells in the row-major order of the merged vision tokens."""
        return np.logical_or.reduce([self._frame_attributes(ti, k) for k in frames])

    def _frame_attributes(self, ti: int, k: int) -> np.ndarray:
        if (key := (ti, k)) not in self._cells:
            px, g = self.cfg.frame_px, self.cfg.frame_px // CELL_PX
            out = np.zeros((g * g, len(COLOURS) + len(SHAPES)), bool)
            for o in self.timelines[ti].objects_at(k / self.cfg.fps):
                cover = shape_mask(o, px)[:g * CELL_PX, :g * CELL_PX].reshape(g, CELL_PX, g, CELL_PX).mean((1, 3))
                covered = cover.reshape(-1) > 0.05
                out[covered, list(COLOURS).index(o.colour)] = True
                out[covered, len(COLOURS) + SHAPES.index(o.shape)] = True
            self._cells[key] = out
        return self._cells[key]

    def chunk_names(self, ti: int) -> np.ndarray:
        """(chunks, NAMES) bool: which shapes and colours any object on the chunk's frames shows (`frames_show`)."""
        if ti not in self._names:
            tl, fps = self.timelines[ti], self.cfg.fps
            out = np.zeros((len(self.frames[ti]) // self.cfg.frames_per_chunk, len(NAMES)), bool)
            for c in range(len(out)):
                for k in self.chunk_frames(c):
                    for o in tl.objects_at(k / fps):
                        out[c, NAMES.index(o.shape)] = out[c, NAMES.index(o.colour)] = True
            self._names[ti] = out
        return self._names[ti]

    # ---- samples -----------------------------------------------------------------------------------------
    def sample(self, window_blocks: int, timelines: list[int] | None = None, turns: int | None = None,
               rng: np.random.Generator | None = None) -> dict:
        """A context at a random chunk boundary `now`, its question, and up to `turns` earlier dialogue turns (by
        default drawn from `turn_mix`; none for a question answered without dialogue). "dialogue" holds the
        earlier turns as (question, answer, family, time asked), oldest first; "turns" the (question, answer,
        family) of the whole prompt, the question last."""
        cfg, rng = self.cfg, rng or self.rng
        fpc = cfg.frames_per_chunk
        chunk_s = fpc / cfg.fps
        pool = list(timelines or self.train_ids)
        heard = [i for i in pool if self.lines[i]]  # streams with sound, for questions about what was said
        if not heard and all(f in SPEECH for f in self.families):
            raise ValueError("questions about what was said need a stream with sound; none of these has one")
        while True:
            family = self.families[rng.choice(len(self.families), p=self.family_p)]
            if family in SPEECH and not heard:
                continue
            ti = int(rng.choice(heard if family in SPEECH else pool))
            tl = self.timelines[ti]
            # the engine's chunks start at frame 0: chunk c holds frames c*fpc .. c*fpc+fpc-1
            k_now = fpc * int(rng.integers(window_blocks + 2, tl.n_frames // fpc)) - 1
            qa = self._qa(ti, family, k_now, rng, window_blocks * chunk_s)
            if qa is None:
                continue
            first_window = k_now + 1 - window_blocks * fpc  # first frame of the window
            window = [list(range(s, s + fpc)) for s in range(first_window, k_now + 1, fpc)]
            past = [list(range(s, s + fpc)) for s in range(first_window - fpc, -1, -fpc)]  # newest first
            first_c, newest_c = first_window // fpc, k_now // fpc
            lines = self.lines[ti]
            if qa.family == "realtime_said" and slot(line_of(lines, qa.evidence_s), chunk_s) <= first_c:
                continue  # the line left this short window (the engine's 8 s hold every line realtime_said asks of)
            if qa.family in SPEECH:
                remembered = [u for u in lines if slot(u, chunk_s) <= first_c]  # evicted into memory
                retrieved = self._retrieved_speech(ti, qa, past, remembered, chunk_s, rng)
            else:
                retrieved = self._retrieved(tl, qa, past, chunk_s, rng)
                retrieved = None if retrieved is None else [(c[0] / cfg.fps, c) for c in retrieved]
            if retrieved is None:
                continue
            if qa.family in ("backward_at_time", "backward_said_at_time"):
                window = []
            n = 0 if qa.family in ALONE else self._n_turns(rng) if turns is None else turns
            dialogue = self.earlier_turns(ti, k_now, n, qa.family, rng, window_blocks * chunk_s)
            # the window in the engine's order: each speech block just before the first chunk after its end; and
            # the window before it (its "ghosts"), which the engine encoded the window's first blocks on
            spoken: dict[int, list[tuple[float, str]]] = {}
            for u in lines:
                if first_c - window_blocks < (c := slot(u, chunk_s)) <= newest_c:
                    spoken.setdefault(c, []).append((u.t_s, u.block))
            ghosts = [p for frames in (past[:window_blocks][::-1] if window else [])
                      for p in (*spoken.get(frames[0] // fpc, ()), (frames[0] / cfg.fps, frames))]
            if window:
                ghosts += spoken.get(first_c, [])
            laid = [p for frames in window for p in (*spoken.get(frames[0] // fpc, ()), (frames[0] / cfg.fps, frames))
                    if frames[0] // fpc > first_c or not isinstance(p[1], str)]
            # chunks (frame lists) and speech blocks (their text), in context order, and when each starts
            laid = sorted(retrieved, key=lambda p: p[0]) + laid
            return {"ti": ti, "chunks": [x for _, x in laid], "starts": [t for t, _ in laid],
                    "retrieved": len(retrieved), "ghosts": ghosts, "t_s": k_now / cfg.fps, "dialogue": dialogue,
                    "turns": [(q, a, f) for q, a, f, _ in dialogue] + [(qa.text, qa.answer, qa.family)],
                    "question": qa.text, "family": qa.family, "answer": qa.answer}

    def _n_turns(self, rng: np.random.Generator) -> int:
        p = np.asarray(self.cfg.turn_mix, dtype=float)
        return int(rng.choice(len(p), p=p / p.sum()))

    def earlier_turns(self, ti: int, k_now: int, n: int, family: str, rng: np.random.Generator,
                      window_s: float) -> list[tuple[str, str, str, float]]:
        """Up to n (question, answer, family, time asked) turns asked before frame k_now, oldest first: each at
        least one frame before the next (gaps drawn with mean `turn_gap_s`), a user question (of the training's
        `DIALOGUE_FAMILIES`, by their weights; the current question's family with probability `same_family_p`)
        with the answer that was right when it was asked. Fewer where the stream is too young."""
        cfg = self.cfg
        out, k = [], k_now
        names = [f for f in DIALOGUE_FAMILIES if f in cfg.families] or list(DIALOGUE_FAMILIES)
        w = np.array([cfg.families.get(f, 1.0) for f in names], dtype=float)
        for _ in range(n):
            for _ in range(8):
                k_e = k - max(1, round(rng.exponential(cfg.turn_gap_s) * cfg.fps))
                if k_e < 1:
                    continue
                same = family in DIALOGUE_FAMILIES and rng.random() < cfg.same_family_p
                f = family if same else names[int(rng.choice(len(names), p=w / w.sum()))]
                if (e := self._qa(ti, f, k_e, rng, window_s)) is not None:
                    out.append((e.text, e.answer, e.family, k_e / cfg.fps))
                    k = k_e
                    break
            else:
                break
        return out[::-1]

    def _qa(self, ti: int, family: str, k_now: int, rng: np.random.Generator, window_s: float,
            aloud: bool = True) -> QA | None:
        """A question of `family` about the moment of frame k_now, the last frame of the newest chunk. The answer
        to what was said is the line's transcript, as the speech block shows it. `aloud`: a user question may be
        asked in its heard words (`heard`, `cfg.heard_p`)."""
        tl = self.timelines[ti]
        if family == "probe_edge":
            return probe_edge(tl, list(range(k_now + 1 - self.cfg.frames_per_chunk, k_now + 1)), rng)
        qa = sample_qa(tl, k_now / self.cfg.fps, rng, window_s, [family])
        if qa is not None and family in ("realtime_said", "backward_said_at_time"):
            qa = dataclasses.replace(qa, answer=line_of(self.lines[ti], qa.evidence_s).transcript)
        if aloud and qa is not None and family in ASKED_ALOUD and self.heard.get(qa.text):
            qa = asked_aloud(qa, self.heard[qa.text], self.cfg.heard_p, rng)
        return qa

    def draw_question(self, family: str, rng: np.random.Generator) -> str | None:
        """The text of a question of `family` about a random moment of a random training stream (None when none
        fits there), as written."""
        pool = [i for i in self.train_ids if self.lines[i]] if family in SPEECH else self.train_ids
        if not pool:
            return None
        ti = int(rng.choice(pool))
        fpc = self.cfg.frames_per_chunk
        k_now = fpc * int(rng.integers(self.cfg.window_blocks + 2, self.timelines[ti].n_frames // fpc)) - 1
        qa = self._qa(ti, family, k_now, rng, self.cfg.window_blocks * fpc / self.cfg.fps, aloud=False)
        return None if qa is None else qa.text

    def eval_set(self, n: int, turns: int = 0) -> list[dict]:
        """n samples from the held-out timelines with the engine's window length and `turns` earlier turns (fixed
        seed)."""
        rng = np.random.default_rng(12345 + turns)
        return [self.sample(self.cfg.window_blocks, self.eval_ids, turns=turns, rng=rng) for _ in range(n)]

    def _retrieved_speech(self, ti: int, qa: QA, past: list[list[int]], remembered: list[Line], chunk_s: float,
                          rng: np.random.Generator) -> list[tuple[float, list[int] | str]] | None:
        """(start time, chunk or speech block) in the retrieved slot for a question about what was said, as
        `Reasoning.retrieve` gives them: for a named time the blocks there (`memory.ids_at`, half a chunk either
        side); for a quoted word the speech block saying it (when memory holds it) then chunks by meaning; else the
        speech blocks nearest by meaning (here: any of memory's), then chunks, top_k in all; nothing for a question
        about the moment just past."""
        k, fps = self.cfg.top_k, self.cfg.fps
        if about_now(qa.text):  # "what was just said?": the window alone (scope.about_now)
            return []
        line = line_of(self.lines[ti], qa.evidence_s)
        if qa.family == "backward_said_at_time":
            if line not in remembered:
                return None
            t = math.floor(line.t_s + 1e-6)
            lo, hi = t - chunk_s / 2, t + chunk_s / 2
            out = [(c[0] / fps, c) for c in past if c[0] / fps <= hi and (c[-1] + 1) / fps >= lo]
            out += [(u.t_s, u.block) for u in remembered if u.t_s <= hi and u.t_end_s >= lo]
            return sorted(out, key=lambda p: p[0])[:k]
        if qa.family == "when_said" and line in remembered:
            chosen = [(line.t_s, line.block)]
        else:
            pick = rng.choice(len(remembered), min(k, len(remembered)), replace=False) if remembered else []
            chosen = [(remembered[i].t_s, remembered[i].block) for i in pick]
        if (fill := k - len(chosen)) and past:
            chosen += [(past[i][0] / fps, past[i]) for i in rng.choice(len(past), min(fill, len(past)), replace=False)]
        return chosen

    def _retrieved(self, tl: Timeline, qa, past: list[list[int]], chunk_s: float,
                   rng: np.random.Generator) -> list[list[int]] | None:
        cfg = self.cfg
        k = cfg.top_k
        if not past:
            return []
        fps = cfg.fps
        if qa.family == "backward_at_time":
            t = qa.evidence_s[0]
            hits = [c for c in past if c[0] / fps <= t + chunk_s / 2 and (c[-1] + 1) / fps >= t - chunk_s / 2]
            return hits[:k] or None
        if not qa.family.startswith("backward"):
            return []  # a question about now: the engine answers it from the window alone (scope.about_now)
        a, b = qa.evidence_s
        evidence = [c for c in past if a <= c[0] / fps and (c[-1] + 1) / fps <= b + 1e-6]
        if not evidence:
            return None
        n_ev = int(rng.integers(1, min(k, len(evidence)) + 1))
        chosen = [evidence[i] for i in rng.choice(len(evidence), n_ev, replace=False)]
        n_random = k - n_ev
        others = [c for c in past if c not in chosen]
        if others and rng.random() < 0.5:  # like the engine, prefer old blocks showing what the question names
            sample = [others[i] for i in rng.choice(len(others), min(40, len(others)), replace=False)]
            shape, colour = mentions(qa.text)
            if shape or colour:
                others = [c for c in sample if frames_show(tl, c, shape, colour)] or others
        if others and n_random:
            chosen += [others[i] for i in rng.choice(len(others), min(n_random, len(others)), replace=False)]
        return chosen


def asked_aloud(qa: QA, heard: list[str], p: float, rng: np.random.Generator) -> QA:
    """With probability p, the question in one of the words it was `heard` in (its answer the same); else as is."""
    if not heard or rng.random() >= p:
        return qa
    return dataclasses.replace(qa, text=heard[int(rng.integers(len(heard)))])


def probe_edge(tl: Timeline, frames: list[int], rng: np.random.Generator) -> QA | None:
    """A trigger's yes/no probe about the newest chunk (frame indices `frames`) at any moment, changes included,
    as the engine asks it on every chunk: yes for a pair on screen in every frame of the chunk (just entered
    too), no for a pair in none of them: half of those a pair that left in the last 8 s or shares its colour or
    shape with one on screen, and an empty screen as often as it comes. None when the chunk is ambiguous for the
    pair drawn (on screen in some of its frames only)."""
    seen = [set(describe(tl, k / tl.fps)) for k in frames]
    both, either = set.intersection(*seen), set.union(*seen)
    t = frames[-1] / tl.fps
    if rng.random() < 0.5:
        if not both:
            return None
        pair, answer = sorted(both)[int(rng.integers(len(both)))], "yes"
    else:
        k0 = max(0, frames[0] - round(8 * tl.fps))
        left = {p for k in range(k0, frames[0]) for p in describe(tl, k / tl.fps)} - either
        near = {(c, s) for c in COLOURS for s in SHAPES if any(c == c2 or s == s2 for c2, s2 in either)} - either
        absent = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in either]
        pool = sorted(left | near) if (left or near) and rng.random() < 0.5 else absent
        pair, answer = pool[int(rng.integers(len(pool)))], "no"
    c, s = pair
    text = PROBE_TEMPLATE.format(a="an" if c[0] in "aeiou" else "a", c=c, s=s)
    return QA("probe_edge", text, answer, t, (frames[0] / tl.fps, t))
