"""`streamvid train-tiny`: train the bundled ShapesWorld model, a small Qwen2.5-VL, from scratch on a CPU.

Every training sample is laid out exactly as the engine lays out an answer context (see `positions.layout`):
sinks (system prompt), retrieved memory blocks in time order, the recent window of blocks, then the questions
and answers, each video chunk its own <|vision_start|>...<|vision_end|> group with Qwen's 3-D positions, chunks
on the engine's grid (chunk c holds frames c*fpc ...). What sits in the "retrieved" slot imitates the engine:
for a memory question some of the blocks that show the evidence plus older distractors; a question about now
gets the window alone (the engine searches memory for questions about the past only, `scope.about_now`); a
question that names a time gets the blocks at that time and no window, as the engine answers it. Trigger probes
(`probe_edge`) are asked about the newest chunk at any moment, as the engine asks them on every chunk.

ShapesWorld puts every object inside one cell of the model's merged-token grid (`synth.world`), so each vision
token shows at most one object. Training runs in two stages.

1. The vision tower learns alone for `vision_warmup_steps` steps, on freshly drawn single-frame grid scenes and
   on the training timelines' decoded chunks in turn, with dense supervision (`_Readout`): per merged vision
   token, which shape and which colour cover its cell; per chunk, the object count. Each colour and shape word's
   input embedding then takes the direction of its detector (`_align_words`), so a token showing a red circle
   points along the embeddings of " red" and " circle" and the words of a question match what was seen by plain
   attention (and by the layer-0 retrieval vectors). The tower is then frozen at the weights the engine will run,
   and its tokens for every chunk of every timeline are computed once (`_Data.encode_chunks`); `_vision_check`
   records how well they name their cells.
2. The language model learns on those tokens, at text speed, from three signals:
   - next-token loss on the answers (several questions per context, earlier ones as dialogue turns);
   - where to look (`_attention_loss`), in two hops. At every colour or shape word of a question, two heads of
     decoder layer 1 are taught to attend to the vision tokens that show that colour or shape — in the newest
     block for a question about now, in the retrieved blocks for one about the past — so the word's position
     gathers what the object it names looks like. At the position that predicts the answer's first token, two
     heads of layer 2 are taught to attend to those words (to the objects' vision tokens themselves for a
     question that names nothing, such as a count). An answer that lists objects ("purple hexagon, red star")
     is taught the same hops at each listed colour word, which predicts that object's shape. Without them the
     answer takes the colour of the right object but a shape from elsewhere, and older blocks in the context (the
     same shape in another colour) pull answers about now into the past;
   - a contrastive loss on the engine's retrieval vectors: at decoder layer 0, the pre-RoPE keys of a block's
     video tokens (their mean and each region's, scored as the engine's memory scores a block) and the mean
     pre-RoPE query of the question's tokens (GQA heads averaged). Nothing mixes tokens before layer 0's
     projections, so those vectors are the same here as in the engine.
   The learning rate follows a cosine over the main steps or the time budget, whichever runs out first. The first
   `short_window_frac` of that progress sees 1-3 window blocks.

`init_from` fine-tunes an earlier checkpoint instead: no warm-up, its word embeddings as they are, and its tower
as it is unless `vision_refine_steps` > 0. Then the tower first learns on for that many steps with the warm-up's
dense targets on fresh grid scenes, half of them showing the shapes a small tower confuses (`CONFUSABLE`), while
an anchor keeps its tokens where the language model learnt to read them (`_vision_refine`). With `steps` 0 it is
the only stage, and only the held-out timelines of the vision check are built.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from streamvid.adapters.hf import region_pool
from streamvid.adapters.qwen2_5_vl import QwenVLAdapter, mean_queries
from streamvid.checkpoints.tiny import build_tiny_checkpoint
from streamvid.embedders import REGION_WEIGHT
from streamvid.sources import FileSource
from streamvid.synth.questions import QA, describe, frames_show, mentions, sample_qa
from streamvid.synth.world import (
    BACKGROUNDS,
    CELL_PX,
    COLOURS,
    JITTER_PX,
    SHAPES,
    SIZE_RANGE,
    Obj,
    Timeline,
    draw,
    generate,
    shape_mask,
    write_mp4,
)

log = logging.getLogger(__name__)

REALTIME = ("realtime_colour", "realtime_shape", "realtime_count", "realtime_exists", "probe", "probe_edge")
FAMILY_WEIGHTS = {"realtime_colour": 1.0, "realtime_shape": 1.0, "realtime_count": 1.0, "realtime_exists": 1.0,
                  "probe": 1.0, "probe_edge": 1.0, "backward_colour": 2.0, "backward_shape": 1.5,
                  "backward_at_time": 1.5}
CONFUSABLE = ("circle", "hexagon")  # the shapes the bundled tower confused most (benchmarks/vision_confusion.py)
PROBE_TEMPLATE = "Is there {a} {c} {s} now? Answer yes or no."
N_EVAL_TIMELINES = 2


@dataclass(frozen=True)
class TrainConfig:
    out_dir: Path
    seed: int = 0
    steps: int | None = None  # None: 6,000 (the time budget usually ends training first); 0: the tower alone
    batch: int = 8
    lr: float = 1e-3
    weight_decay: float = 0.1
    window_blocks: int = 8  # the engine's default window (window_tokens / tokens per block)
    top_k: int = 4  # the engine's default memory_top_k
    fps: float = 2.0
    frames_per_chunk: int = 2
    frame_px: int = 112
    minutes: float = 10.0
    n_timelines: int = 32
    hidden: int = 128
    layers: int = 4
    contrastive_weight: float = 1.0
    short_window_frac: float = 0.3  # the first steps see 1-3 window blocks: fewer distractors while binding is learnt
    max_turns: int = 8  # questions per context (earlier ones about now, as earlier dialogue turns in the engine)
    time_budget_s: float = 105 * 60
    vision_warmup_steps: int = 800
    warmup_scenes: int = 32  # scenes or chunks per vision warm-up step
    word_attention_layer: int = 1  # decoder layer whose heads 0 and 1 learn to look from a named word to the object
    answer_attention_layer: int = 2  # ... and from the answer to the named words
    attention_weight: float = 0.5
    log_every: int = 50
    eval_every: int = 300
    eval_samples: int = 160
    families: dict = field(default_factory=lambda: dict(FAMILY_WEIGHTS))
    init_from: Path | None = None  # fine-tune this checkpoint instead of a fresh one
    vision_refine_steps: int = 0  # fine-tuning: steps that refine its tower first (0: the tower stays as it is)
    vision_refine_lr: float = 1e-3
    vision_anchor: float = 1.0  # weight of the refined tokens' relative squared distance to the tower's tokens before
    confusable_frac: float = 0.5  # share of refinement scenes that show a CONFUSABLE shape


class _Data:
    """Samples (chunks, dialogue of questions and answers) from ShapesWorld timelines.

    Frames go through the same path as in the engine: each timeline is written as H.264 and decoded with
    `FileSource`, so the model learns from what the engine will see (compression included)."""

    def __init__(self, cfg: TrainConfig, rng: np.random.Generator):
        self.cfg = cfg
        self.rng = rng
        seeds = [cfg.seed * 100_000 + i for i in range(cfg.n_timelines)]
        seeds += [cfg.seed * 100_000 + 50_000 + i for i in range(N_EVAL_TIMELINES)]  # held out: progress checks
        self.timelines = [generate(s, cfg.minutes * 60, cfg.fps, cfg.frame_px // CELL_PX) for s in seeds]
        self.train_ids = list(range(cfg.n_timelines))
        self.eval_ids = list(range(cfg.n_timelines, len(seeds)))
        with tempfile.TemporaryDirectory(prefix="streamvid-train-") as tmp:
            self.frames = [self._decode(tl, Path(tmp) / f"{i}.mp4") for i, tl in enumerate(self.timelines)]
        names = list(cfg.families)
        w = np.array([cfg.families[n] for n in names], dtype=float)
        self.families, self.family_p = names, w / w.sum()
        self._cells: dict[tuple[int, int], np.ndarray] = {}

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

    @torch.no_grad()
    def encode_chunks(self, model, processor, batch: int = 64) -> None:
        """Run the (then frozen) vision tower once over every chunk of every timeline, on the engine's chunk grid
        and through the engine's processor call, so the language model trains on exactly the vision tokens the
        engine will feed it, without paying for the tower at every step."""
        fpc = self.cfg.frames_per_chunk
        self.tokens = []
        for frames in self.frames:
            chunks = [frames[c * fpc:(c + 1) * fpc] for c in range(len(frames) // fpc)]
            out = []
            for i in range(0, len(chunks), batch):
                video = _video_inputs(processor, chunks[i:i + batch])
                features = model.model.get_video_features(video["pixel_values_videos"], video["video_grid_thw"],
                                                          return_dict=True).pooler_output
                out += list(features)
            self.tokens.append(torch.stack(out))  # (chunks, tokens per chunk, hidden)
        self.chunk_grid = video["video_grid_thw"][:1].clone()

    def chunk_frames(self, c: int) -> list[int]:
        """Frame indices of the engine's chunk c (chunks start at frame 0)."""
        fpc = self.cfg.frames_per_chunk
        return list(range(c * fpc, (c + 1) * fpc))

    def chunk_tokens(self, ti: int, frames: list[int]) -> torch.Tensor:
        """The vision tokens of the engine's chunk that starts at frame `frames[0]` (after `encode_chunks`)."""
        return self.tokens[ti][frames[0] // self.cfg.frames_per_chunk]

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

    def sample(self, window_blocks: int, timelines: list[int] | None = None, max_turns: int | None = None,
               rng: np.random.Generator | None = None) -> dict:
        """A context at a random chunk boundary with questions about it; only the last may need memory (retrieval
        is for the current question), earlier turns are about now, as earlier dialogue turns in the engine.

        A question that names a stream time is answered, as in the engine, from the blocks at that time alone; a
        question about now, from the window alone (the engine retrieves for questions about the past only)."""
        cfg, rng = self.cfg, rng or self.rng
        fpc = cfg.frames_per_chunk
        chunk_s = fpc / cfg.fps
        max_turns = cfg.max_turns if max_turns is None else max_turns
        while True:
            ti = int(rng.choice(timelines or self.train_ids))
            tl = self.timelines[ti]
            # the engine's chunks start at frame 0: chunk c holds frames c*fpc .. c*fpc+fpc-1
            k_now = fpc * int(rng.integers(window_blocks + 2, tl.n_frames // fpc)) - 1
            family = self.families[rng.choice(len(self.families), p=self.family_p)]
            qa = self._qa(tl, family, k_now, rng, window_blocks * chunk_s)
            if qa is None:
                continue
            first_window = k_now + 1 - window_blocks * fpc  # first frame of the window
            window = [list(range(s, s + fpc)) for s in range(first_window, k_now + 1, fpc)]
            past = [list(range(s, s + fpc)) for s in range(first_window - fpc, -1, -fpc)]  # newest first
            retrieved = self._retrieved(tl, qa, past, chunk_s, rng)
            if retrieved is None:
                continue
            turns = {}  # earlier questions (distinct) -> (answer, family): more supervision for the same context
            if qa.family == "backward_at_time":
                window = []
            elif max_turns > 1:
                for f in rng.choice(REALTIME, int(rng.integers(0, max_turns))):
                    if (e := self._qa(tl, str(f), k_now, rng, window_blocks * chunk_s)) is not None:
                        turns.setdefault(e.text, (e.answer, e.family))
            turns.pop(qa.text, None)
            turns = [(q, a, f) for q, (a, f) in turns.items()] + [(qa.text, qa.answer, qa.family)]
            chunks = sorted(retrieved, key=lambda c: c[0]) + window
            return {"ti": ti, "chunks": chunks, "turns": turns, "question": qa.text, "family": qa.family,
                    "answer": qa.answer}

    def _qa(self, tl: Timeline, family: str, k_now: int, rng: np.random.Generator, window_s: float) -> QA | None:
        """A question of `family` about the moment of frame k_now, the last frame of the newest chunk."""
        if family == "probe_edge":
            return probe_edge(tl, list(range(k_now + 1 - self.cfg.frames_per_chunk, k_now + 1)), rng)
        return sample_qa(tl, k_now / self.cfg.fps, rng, window_s, [family])

    def eval_set(self, n: int) -> list[dict]:
        """n single-question samples from the held-out timelines with the engine's window length (fixed seed)."""
        rng = np.random.default_rng(12345)
        return [self.sample(self.cfg.window_blocks, self.eval_ids, max_turns=1, rng=rng) for _ in range(n)]

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


class _Batcher:
    """Turns samples into model inputs laid out like the engine's answer context."""

    def __init__(self, adapter: QwenVLAdapter, data: _Data):
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

    def build(self, samples: list[dict]) -> dict:
        a, tok = self.a, self.a.tokenizer
        rows, labels, embeds, grids, chunk_spans, chunk_meta = [], [], [], [], [], []
        word_looks, answer_looks = [], []
        for si, s in enumerate(samples):
            ids = list(self.sink_ids)
            first_span = len(chunk_spans)
            for frames in s["chunks"]:
                tokens = self.data.chunk_tokens(s["ti"], frames)
                n = len(tokens)
                chunk_spans.append((si, len(ids) + 1, len(ids) + 1 + n))
                chunk_meta.append((s["ti"], frames))
                ids += [a.vision_start_id] + [a.video_pad_id] * n + [a.vision_end_id]
                embeds.append(tokens)
                grids.append(self.data.chunk_grid)
            lab = [-100] * len(ids)
            # the engine's prompt with earlier turns as dialogue (`adapter.prompt`), answers labelled; special
            # tokens split the text, so the pieces tokenize exactly as the whole string does
            spans = chunk_spans[first_span:]
            for n, (question, answer, family) in enumerate(s["turns"]):
                prompt = tok.encode(("\n<|im_start|>user\n" if n else "") + a.prompt(question),
                                    add_special_tokens=False)
                answer_ids = tok.encode(answer, add_special_tokens=False) + [self.end_id]
                lab += [-100] * len(prompt) + answer_ids
                start = len(ids)
                words = [i for i, t in enumerate(prompt) if t in self.word_column]  # colour and shape words
                for i in words:
                    if cells := self._look_at(s, spans, family, [self.word_column[prompt[i]]]):
                        word_looks.append((si, start + i, cells))
                words = [start + i for i in words]
                answer_targets = words or self._look_at(s, spans, family, [])
                if answer_targets:
                    answer_looks.append((si, start + len(prompt) - 1, answer_targets))
                # an answer that lists objects ("red star, yellow triangle"): at each listed colour, which predicts
                # its object's shape, layer 1 looks at the object and layer 2 at that colour word itself
                at = start + len(prompt)
                for j, (t, nxt) in enumerate(zip(answer_ids, answer_ids[1:])):
                    column = self.answer_column.get(t, len(COLOURS))
                    if column < len(COLOURS) and self.answer_column.get(nxt, -1) >= len(COLOURS):
                        if cells := self._look_at(s, spans, family, [column]):
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

    def _look_at(self, s: dict, spans: list[tuple[int, int, int]], family: str, cols: list[int]) -> list[int]:
        """Token positions of the vision tokens that show the attributes `cols` (any object, for none), in the
        newest block for a question about now, in every block for one about the past (the retrieved blocks; a
        timed question has no window)."""
        chunks = list(zip(spans, s["chunks"]))
        if family in REALTIME:
            chunks = chunks[-1:]
        out = []
        for (_, a, b), frames in chunks:
            attributes = self.data.cell_attributes(s["ti"], frames)
            hit = attributes[:, cols].any(1) if cols else attributes.any(1)
            out += [a + int(i) for i in np.flatnonzero(hit) if a + int(i) < b]
        return out


def train(cfg: TrainConfig) -> dict:
    """Build a fresh tiny checkpoint, train it, save it to cfg.out_dir with a training record."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    out = Path(cfg.out_dir)
    previous = None
    if cfg.init_from is not None:  # fine-tune: the checkpoint's files, its record kept
        init = Path(cfg.init_from)
        if not (init / "config.json").is_file():
            raise ValueError(f"no checkpoint to fine-tune in {init}")
        if init.resolve() != out.resolve():
            shutil.copytree(init, out, dirs_exist_ok=True)
        if (out / "training.json").is_file():
            previous = json.loads((out / "training.json").read_text())
    else:
        build_tiny_checkpoint(out, seed=cfg.seed, hidden=cfg.hidden, layers=cfg.layers, frame_px=cfg.frame_px)
    adapter = QwenVLAdapter(str(out))
    model = adapter.model
    model.train()
    steps = 6000 if cfg.steps is None else cfg.steps
    # a fine-tune without main steps (the tower refined alone) reads only the held-out timelines (its vision check)
    data = _Data(replace(cfg, n_timelines=0) if steps == 0 and cfg.init_from is not None else cfg, rng)
    batcher = _Batcher(adapter, data)
    eval_set = data.eval_set(cfg.eval_samples)
    model.set_attn_implementation("eager")  # the attention loss reads the attention weights
    captured: list[torch.Tensor] = []
    hook = model.model.language_model.layers[0].self_attn.k_proj.register_forward_hook(
        lambda _m, _i, o: captured.append(o))
    # the vision warm-up's dense signals (its readout heads are for training only and are not saved)
    tok = adapter.tokenizer
    words = torch.tensor([tok.convert_tokens_to_ids(tok.tokenize(" " + w))[0] for w in [*COLOURS, *SHAPES]])
    readout = _Readout(model.config.vision_config.out_hidden_size)
    if cfg.init_from is None:
        history = _vision_warmup(model, adapter.video_processor, cfg, rng, readout, data)
        _align_words(model.get_input_embeddings(), words, readout)
    elif cfg.vision_refine_steps > 0:
        history = _vision_refine(model, adapter.video_processor, cfg, rng, readout)
    else:
        history = []
    tower_trained = cfg.init_from is None or cfg.vision_refine_steps > 0
    # from here the tower is frozen at the weights the engine will run (saved in bfloat16), and its tokens for
    # every chunk are computed once: the main loop trains the language model alone, at text speed
    for p in model.model.visual.parameters():
        p.requires_grad_(False)
        p.data = p.data.to(torch.bfloat16).float()
    t_enc = time.perf_counter()
    data.encode_chunks(model, adapter.video_processor)
    history.append({"vision_check": _vision_check(data, readout) if tower_trained else None,
                    "encode_s": round(time.perf_counter() - t_enc, 1)})
    log.warning("train %s", history[-1])
    # the language model's rate stays low and its weights decayed, or its attention saturates onto a few prompt
    # tokens before it finds what the vision tokens say (a softmax at probability 1 passes no gradient to the
    # keys it ignores)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    t0 = time.perf_counter()

    def progress(step: int) -> float:  # main steps or time budget, whichever runs out first
        return min(1.0, max(step / steps, (time.perf_counter() - t0) / cfg.time_budget_s))

    done_steps = 0
    for step in range(steps):
        done = progress(step)
        for group in opt.param_groups:
            group["lr"] = cfg.lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * done))
        # the window length varies by batch: 1-3 blocks at first (few distractors while the model learns to bind
        # what it is asked about to what it sees), then up to and mostly at the engine's length
        short = done < cfg.short_window_frac
        if short:
            w = int(rng.integers(1, 4))
        else:
            w = cfg.window_blocks if rng.random() < 0.5 else int(rng.integers(2, cfg.window_blocks + 1))
        batch = batcher.build([data.sample(w) for _ in range(cfg.batch)])
        captured.clear()
        res = forward(model, batch, output_attentions=True)
        logits = res.logits
        lm_loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1))
        c_loss = _contrastive(model, batch, captured[0], data)
        a_loss = (_attention_loss(res.attentions[cfg.word_attention_layer], batch["word_looks"])
                  + _attention_loss(res.attentions[cfg.answer_attention_layer], batch["answer_looks"]))
        loss = lm_loss + cfg.contrastive_weight * c_loss + cfg.attention_weight * a_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done_steps = step + 1
        over_budget = time.perf_counter() - t0 > cfg.time_budget_s
        last = step == steps - 1 or over_budget
        if step % cfg.log_every == 0 or last:
            rec = {"step": step, "lm_loss": round(lm_loss.item(), 4), "contrastive": round(c_loss.item(), 4),
                   "attention": round(a_loss.item(), 4),
                   "elapsed_s": round(time.perf_counter() - t0, 1)}
            if (step and step % cfg.eval_every == 0) or last:
                rec["held_out"] = _evaluate(model, batcher, eval_set)
                model.train()
            history.append(rec)
            log.warning("train %s", rec)
        if over_budget:
            log.warning("time budget of %.0f s reached at step %d", cfg.time_budget_s, step)
            break
        if step and step % 500 == 0:
            _save(model, out)
    hook.remove()
    model.eval()
    _save(model, out)
    record = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items() if k != "out_dir"},
              "steps_done": done_steps, "train_s": round(time.perf_counter() - t0, 1), "history": history}
    if previous is not None:
        record["fine_tuned_from"] = previous
    (out / "training.json").write_text(json.dumps(record, indent=1))
    return record


def forward(model, batch: dict, **kw):
    """The model's output over a batch from `_Batcher.build`: its precomputed vision tokens in the video slots."""
    ids = batch["input_ids"]
    embeds = model.get_input_embeddings()(ids)
    slots = (ids == model.config.video_token_id).unsqueeze(-1)
    embeds = embeds.masked_scatter(slots, batch["video_embeds"].to(embeds.dtype))
    return model(inputs_embeds=embeds, attention_mask=batch["attention_mask"], position_ids=batch["position_ids"],
                 **kw)


def _attention_loss(attentions: torch.Tensor, looks: list[tuple[int, int, list[int]]]) -> torch.Tensor:
    """-log of the attention mass that heads 0 and 1 put on the vision tokens an answer has to read, at the position
    that predicts the answer's first token. attentions: (batch, heads, L, L)."""
    if not looks:
        return attentions.sum() * 0.0
    losses = [-torch.log(attentions[row, :2, pos, targets].sum(-1) + 1e-6) for row, pos, targets in looks]
    return torch.cat(losses).mean()


def _vision_warmup(model, processor, cfg: TrainConfig, rng: np.random.Generator, readout: _Readout,
                   data: _Data) -> list[dict]:
    """The vision tower alone with dense targets (`_Readout`), so that the language model learns on vision tokens
    that already tell shapes and colours apart. Steps alternate between freshly drawn single-frame grid scenes and
    chunks of the training timelines as the engine decodes them (compression, and objects that hop within a
    chunk, included)."""
    if cfg.vision_warmup_steps <= 0:
        return []
    params = [*model.model.visual.parameters(), *readout.parameters()]
    opt = torch.optim.AdamW(params, lr=2 * cfg.lr, weight_decay=0.0)
    history, t0 = [], time.perf_counter()
    fpc = cfg.frames_per_chunk
    for step in range(cfg.vision_warmup_steps):
        if step % 2 == 0:
            video, attributes, counts = scene_batch(processor, rng, cfg.warmup_scenes, cfg.frame_px, fpc)
        else:
            chunks = []
            for _ in range(cfg.warmup_scenes):
                ti = int(rng.choice(data.train_ids))
                c = int(rng.integers(data.timelines[ti].n_frames // fpc))
                chunks.append((ti, data.chunk_frames(c)))
            video = _video_inputs(processor, [np.stack([data.frame(ti, k) for k in ks]) for ti, ks in chunks])
            attributes = [data.cell_attributes(ti, ks) for ti, ks in chunks]
            counts = [min(len(data.timelines[ti].objects_at(ks[-1] / cfg.fps)), 3) for ti, ks in chunks]
        tokens = model.model.get_video_features(video["pixel_values_videos"], video["video_grid_thw"],
                                                return_dict=True).pooler_output  # what the engine feeds the decoder
        loss = readout.loss(torch.cat(list(tokens)), attributes, counts)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % cfg.log_every == 0 or step == cfg.vision_warmup_steps - 1:
            rec = {"vision_warmup_step": step, "vision_aux": round(loss.item(), 4),
                   "elapsed_s": round(time.perf_counter() - t0, 1)}
            history.append(rec)
            log.warning("train %s", rec)
    return history


def _vision_refine(model, processor, cfg: TrainConfig, rng: np.random.Generator, readout: _Readout) -> list[dict]:
    """Train a checkpoint's tower on: `_Readout` fitted on its frozen tokens first (200 steps), then tower and
    readout together on fresh grid scenes (a `confusable_frac` share showing a CONFUSABLE shape), plus an anchor:
    the squared distance of the tokens to those of the tower as loaded, relative to their mean square. The anchor
    keeps the tokens where the checkpoint's language model reads them, so what the refinement adds (telling a
    circle from a hexagon) reaches answers without relearning to read."""
    import copy

    frozen = copy.deepcopy(model.model.visual).eval().requires_grad_(False)

    def scenes() -> tuple[dict, list[np.ndarray], list[int]]:
        return scene_batch(processor, rng, cfg.warmup_scenes, cfg.frame_px, cfg.frames_per_chunk, cfg.confusable_frac)

    def tokens(tower, video) -> torch.Tensor:
        return tower(video["pixel_values_videos"], grid_thw=video["video_grid_thw"], return_dict=True).pooler_output

    history, t0 = [], time.perf_counter()
    opt = torch.optim.AdamW(readout.parameters(), lr=3e-3)
    for _ in range(200):
        video, cells, counts = scenes()
        with torch.no_grad():
            before = tokens(frozen, video)
        loss = readout.loss(before, cells, counts)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    history.append({"vision_refine_readout": round(loss.item(), 4), "elapsed_s": round(time.perf_counter() - t0, 1)})
    params = [*model.model.visual.parameters(), *readout.parameters()]
    opt = torch.optim.AdamW(params, lr=cfg.vision_refine_lr, weight_decay=0.0)
    steps = cfg.vision_refine_steps
    for step in range(steps):
        lr = cfg.vision_refine_lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr
        video, cells, counts = scenes()
        with torch.no_grad():
            before = tokens(frozen, video)
        after = tokens(model.model.visual, video)
        aux = readout.loss(after, cells, counts)
        anchor = F.mse_loss(after, before) / before.pow(2).mean()
        loss = aux + cfg.vision_anchor * anchor
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % cfg.log_every == 0 or step == steps - 1:
            rec = {"vision_refine_step": step, "vision_aux": round(aux.item(), 4),
                   "anchor": round(anchor.item(), 5), "elapsed_s": round(time.perf_counter() - t0, 1)}
            history.append(rec)
            log.warning("train %s", rec)
    return history


class _Readout(torch.nn.Module):
    """The vision warm-up's targets, per merged vision token: which shape and which colour cover its cell (or
    none: softmax classes, so every occupied cell gets the full gradient of its shape), and per chunk the object
    count (0-3) from the mean of its tokens."""

    def __init__(self, dim: int):
        super().__init__()
        self.shape = torch.nn.Linear(dim, 1 + len(SHAPES))
        self.colour = torch.nn.Linear(dim, 1 + len(COLOURS))
        self.count = torch.nn.Linear(dim, 4)

    def loss(self, merged: torch.Tensor, cells: list[np.ndarray], counts: list[int]) -> torch.Tensor:
        shapes, colours = _classes(np.concatenate(cells))
        pooled = torch.stack([t.mean(0) for t in merged.split([len(c) for c in cells])])
        return (F.cross_entropy(self.shape(merged), torch.from_numpy(shapes))
                + F.cross_entropy(self.colour(merged), torch.from_numpy(colours))
                + F.cross_entropy(self.count(pooled), torch.tensor(counts)))


def _classes(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cells, colours + shapes) bool -> each cell's shape class and colour class, 0 for none (a cell two objects
    covered within one chunk takes the first)."""
    n = len(COLOURS)
    colours, shapes = cells[:, :n], cells[:, n:]
    return (np.where(shapes.any(1), shapes.argmax(1) + 1, 0).astype(np.int64),
            np.where(colours.any(1), colours.argmax(1) + 1, 0).astype(np.int64))


@torch.no_grad()
def _align_words(embed: torch.nn.Embedding, words: torch.Tensor, readout: _Readout) -> None:
    """Give each colour and shape word the direction of its detector in the readout, at the embeddings' usual norm:
    a vision token showing a red circle then points along the input embeddings of " red" and " circle", so the
    question's words match what was seen by plain attention, and by the layer-0 retrieval vectors."""
    detectors = torch.cat([readout.colour.weight[1:], readout.shape.weight[1:]])
    norm = embed.weight.norm(dim=-1).mean()
    embed.weight[words] = F.normalize(detectors, dim=-1) * norm


def _scene(rng: np.random.Generator, px: int, confusable_frac: float = 0.0) -> tuple[np.ndarray, np.ndarray, int]:
    """A random grid scene: 0-3 objects of distinct shapes and colours in distinct cells, each centred in its cell
    with the world's size range and jitter. With probability `confusable_frac` a scene with objects shows one
    CONFUSABLE shape, or (half the time, with two or more objects) all of them. Returns the frame, its (cells,
    colours + shapes) labels and the count."""
    grid = px // CELL_PX
    n = int(rng.choice(4, p=(0.1, 0.3, 0.35, 0.25)))
    cells = rng.choice(grid * grid, n, replace=False)
    shapes, colours = rng.choice(len(SHAPES), n, replace=False), rng.choice(len(COLOURS), n, replace=False)
    if n and rng.random() < confusable_frac:
        confusable = [SHAPES.index(s) for s in CONFUSABLE]
        pick = confusable if n >= len(confusable) and rng.random() < 0.5 else [int(rng.choice(confusable))]
        rest = rng.choice([i for i in range(len(SHAPES)) if i not in pick], n, replace=False)
        shapes = np.array([*pick, *rest][:n])
    labels = np.zeros((grid * grid, len(COLOURS) + len(SHAPES)), bool)
    objects = []
    for cell, si, ci in zip(cells, shapes, colours):
        jx, jy = rng.uniform(-JITTER_PX, JITTER_PX, 2) / px
        objects.append(Obj(0, SHAPES[si], list(COLOURS)[ci], (cell % grid + 0.5) / grid + jx,
                           (cell // grid + 0.5) / grid + jy, rng.uniform(*SIZE_RANGE) / grid))
        labels[cell, ci] = labels[cell, len(COLOURS) + si] = True
    background = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    return draw(objects, background, rng, px), labels, n


def scene_batch(processor, rng: np.random.Generator, n: int, px: int, frames_per_chunk: int,
                confusable_frac: float = 0.0) -> tuple[dict, list[np.ndarray], list[int]]:
    """n random grid scenes (`_scene`), each held still for one chunk of `frames_per_chunk` frames: the processor's
    inputs for them, their cell labels and their object counts."""
    frames, cells, counts = zip(*[_scene(rng, px, confusable_frac) for _ in range(n)])
    return _video_inputs(processor, [np.stack([f] * frames_per_chunk) for f in frames]), list(cells), list(counts)


def _video_inputs(processor, videos: list[np.ndarray]) -> dict:
    """The video processor's inputs for (frames, H, W, 3) chunks, called as the engine's adapter calls it."""
    return processor(videos=videos, return_tensors="pt", do_sample_frames=False, cap_pixels_per_frame=True)


@torch.no_grad()
def _evaluate(model, batcher: _Batcher, samples: list[dict], batch: int = 8) -> dict:
    """Per-family accuracy on held-out samples: every answer token (and the end of turn) is the argmax."""
    model.eval()
    right: dict[str, list[bool]] = {}
    for i in range(0, len(samples), batch):
        b = batcher.build(samples[i:i + batch])
        logits = forward(model, b).logits
        labels = b["labels"][:, 1:]
        ok = (logits[:, :-1].argmax(-1) == labels) | (labels == -100)
        for s, row in zip(b["samples"], ok.all(-1).tolist()):
            right.setdefault(s["family"], []).append(row)
    return {f: round(sum(v) / len(v), 3) for f, v in sorted(right.items())}


def _save(model, out: Path) -> None:
    """Weights in bfloat16 (half the bytes; the adapter loads them as float32 on a CPU)."""
    model.save_pretrained(out, state_dict={k: v.detach().to(torch.bfloat16) for k, v in model.state_dict().items()})


@torch.no_grad()
def _vision_check(data: _Data, readout: _Readout) -> dict:
    """How well the frozen tower's tokens name what their cells show, on the held-out timelines' decoded chunks:
    of the cells an object covers, the share whose shape (colour) the warm-up's readout names right."""
    right_shape, right_colour = [], []
    for ti in data.eval_ids:
        tokens = data.tokens[ti].reshape(-1, data.tokens[ti].shape[-1])
        shapes, colours = _classes(np.concatenate([data.cell_attributes(ti, data.chunk_frames(c))
                                                   for c in range(len(data.tokens[ti]))]))
        occupied = shapes > 0
        right_shape.append((readout.shape(tokens).argmax(-1).numpy() == shapes)[occupied])
        right_colour.append((readout.colour(tokens).argmax(-1).numpy() == colours)[occupied])
    return {"colour": round(float(np.concatenate(right_colour).mean()), 4),
            "shape": round(float(np.concatenate(right_shape).mean()), 4)}


def _contrastive(model, batch: dict, keys: torch.Tensor, data: _Data) -> torch.Tensor:
    """Multi-positive InfoNCE between question vectors and blocks scored as the engine's memory scores them
    (embedders.py: (cosine to the mean key + REGION_WEIGHT x the best region's cosine) / (1 + REGION_WEIGHT)),
    scale 20."""
    cells = data.cfg.frame_px // CELL_PX
    grid = (int(data.chunk_grid[0, 0]), cells, cells)  # the merged video tokens: temporal patches x cell grid
    qs = F.normalize(mean_queries(model, batch["questions"], 0), dim=-1)
    means = F.normalize(torch.stack([keys[si, a:b].mean(0) for si, a, b in batch["chunk_spans"]]), dim=-1)
    regions = F.normalize(torch.stack([region_pool(keys[si, a:b], grid) for si, a, b in batch["chunk_spans"]]),
                          dim=-1)  # (blocks, regions, dim)
    best = torch.einsum("qd,brd->qbr", qs, regions).amax(-1)
    sim = 20.0 * (qs @ means.T + REGION_WEIGHT * best) / (1 + REGION_WEIGHT)  # (questions, blocks)
    losses = []
    for qi, s in enumerate(batch["samples"]):
        shape, colour = mentions(s["question"])
        if shape is None and colour is None:
            continue
        pos = torch.tensor([frames_show(data.timelines[ti], frames, shape, colour)
                            for ti, frames in batch["chunk_meta"]])
        if pos.any() and not pos.all():
            losses.append(torch.logsumexp(sim[qi], 0) - torch.logsumexp(sim[qi][pos], 0))
    return torch.stack(losses).mean() if losses else sim.sum() * 0.0
