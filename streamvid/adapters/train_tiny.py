"""`streamvid train-tiny`: train the bundled ShapesWorld model, a small Qwen2.5-VL, from scratch on a CPU.

Every training sample is laid out exactly as the engine lays out an answer context (see `positions.layout`):
sinks (system prompt), retrieved memory blocks in time order, the recent window of blocks, then the question
and the answer, each video chunk its own <|vision_start|>...<|vision_end|> group with Qwen's 3-D positions.
What sits in the "retrieved" slot imitates the engine: for a memory question some of the blocks that show the
evidence plus older distractors; for a question that names a time, the blocks at that time; for a question about
now, older blocks that may contradict the present (so the model learns to read "is" from the window).

The engine retrieves with the model's own vectors at decoder layer 0: the mean pre-RoPE key of a block's video
tokens and the mean pre-RoPE query of the question's tokens (GQA heads averaged). Nothing mixes tokens before
layer 0's projections, so those vectors are the same here as in the engine. An auxiliary contrastive loss
pulls a question's vector towards blocks that show what it names (its shape and/or colour).
"""

from __future__ import annotations

import json
import logging
import math
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from streamvid.adapters.qwen2_5_vl import QwenVLAdapter
from streamvid.adapters.tiny import build_tiny_checkpoint
from streamvid.synth.questions import sample_qa
from streamvid.sources import FileSource
from streamvid.synth.world import COLOURS, SHAPES, Timeline, generate, write_mp4

log = logging.getLogger(__name__)

REALTIME = ("realtime_colour", "realtime_shape", "realtime_count", "realtime_exists", "probe")
FAMILY_WEIGHTS = {"realtime_colour": 1.0, "realtime_shape": 1.0, "realtime_count": 1.0, "realtime_exists": 1.0,
                  "probe": 1.0, "backward_colour": 1.5, "backward_shape": 1.5, "backward_at_time": 1.0}
_WORDS = re.compile(r"[a-z]+")


@dataclass(frozen=True)
class TrainConfig:
    out_dir: Path
    seed: int = 0
    steps: int | None = None  # None: 1,800
    batch: int = 8
    lr: float = 2e-3
    window_blocks: int = 8  # the engine's default window (window_tokens / tokens per block)
    top_k: int = 4  # the engine's default memory_top_k
    fps: float = 2.0
    frames_per_chunk: int = 2
    frame_px: int = 112
    minutes: float = 10.0
    n_timelines: int = 32
    hidden: int = 128
    layers: int = 4
    contrastive_weight: float = 0.5
    time_budget_s: float = 40 * 60
    log_every: int = 50
    families: dict = field(default_factory=lambda: dict(FAMILY_WEIGHTS))


class _Data:
    """Samples (chunks, dialogue of questions and answers) from ShapesWorld timelines.

    Frames go through the same path as in the engine: each timeline is written as H.264 and decoded with
    `FileSource`, so the model learns from what the engine will see (compression included)."""

    def __init__(self, cfg: TrainConfig, rng: np.random.Generator):
        self.cfg = cfg
        self.rng = rng
        self.timelines = [generate(cfg.seed * 100_000 + i, cfg.minutes * 60, cfg.fps) for i in range(cfg.n_timelines)]
        with tempfile.TemporaryDirectory(prefix="streamvid-train-") as tmp:
            self.frames = [self._decode(tl, Path(tmp) / f"{i}.mp4") for i, tl in enumerate(self.timelines)]
        names = list(cfg.families)
        w = np.array([cfg.families[n] for n in names], dtype=float)
        self.families, self.family_p = names, w / w.sum()

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

    def sample(self, window_blocks: int) -> dict:
        """A context at a random time with 1-3 questions about it; only the last may need memory (retrieval is
        for the current question), earlier turns are about now, as earlier dialogue turns in the engine."""
        cfg, rng = self.cfg, self.rng
        fpc = cfg.frames_per_chunk
        chunk_s = fpc / cfg.fps
        while True:
            ti = int(rng.integers(len(self.timelines)))
            tl = self.timelines[ti]
            k_now = int(rng.integers(window_blocks * fpc + 4, tl.n_frames))
            t_now = k_now / cfg.fps
            family = self.families[rng.choice(len(self.families), p=self.family_p)]
            qa = sample_qa(tl, t_now, rng, window_blocks * chunk_s, [family])
            if qa is None:
                continue
            first_window = k_now + 1 - window_blocks * fpc  # first frame of the window
            window = [list(range(s, s + fpc)) for s in range(first_window, k_now + 1, fpc)]
            past = [list(range(s, s + fpc)) for s in range(first_window - fpc, -1, -fpc)]  # newest first
            retrieved = self._retrieved(tl, qa, past, chunk_s)
            if retrieved is None:
                continue
            turns = {}  # earlier questions (distinct) -> answers: more supervision for the same context
            for f in rng.choice(REALTIME, int(rng.integers(0, 6))):
                if (e := sample_qa(tl, t_now, rng, window_blocks * chunk_s, [str(f)])) is not None:
                    turns.setdefault(e.text, e.answer)
            turns.pop(qa.text, None)
            turns = [*turns.items(), (qa.text, qa.answer)]
            chunks = sorted(retrieved, key=lambda c: c[0]) + window
            return {"ti": ti, "chunks": chunks, "turns": turns, "question": qa.text, "family": qa.family}

    def _retrieved(self, tl: Timeline, qa, past: list[list[int]], chunk_s: float) -> list[list[int]] | None:
        cfg, rng = self.cfg, self.rng
        k = cfg.top_k
        if not past:
            return []
        fps = cfg.fps
        if qa.family == "backward_at_time":
            t = qa.evidence_s[0]
            hits = [c for c in past if c[0] / fps <= t + chunk_s / 2 and (c[-1] + 1) / fps >= t - chunk_s / 2]
            return hits[:k] or None
        n_random = k
        chosen: list[list[int]] = []
        if qa.family.startswith("backward"):
            a, b = qa.evidence_s
            evidence = [c for c in past if a <= c[0] / fps and (c[-1] + 1) / fps <= b + 1e-6]
            if not evidence:
                return None
            n_ev = int(rng.integers(1, min(k, len(evidence)) + 1))
            chosen = [evidence[i] for i in rng.choice(len(evidence), n_ev, replace=False)]
            n_random = k - n_ev
        elif rng.random() < 0.15:
            return []  # memory off or nothing stored yet
        others = [c for c in past if c not in chosen]
        if others and rng.random() < 0.5:  # like the engine, prefer old blocks showing what the question names
            sample = [others[i] for i in rng.choice(len(others), min(40, len(others)), replace=False)]
            shape, colour = _mentions(qa.text)
            if shape or colour:
                others = [c for c in sample if _chunk_shows(tl, c, fps, shape, colour)] or others
        if others and n_random:
            chosen += [others[i] for i in rng.choice(len(others), min(n_random, len(others)), replace=False)]
        return chosen


def _mentions(text: str) -> tuple[str | None, str | None]:
    words = set(_WORDS.findall(text.lower()))
    shape = next((s for s in SHAPES if s in words), None)
    colour = next((c for c in COLOURS if c in words), None)
    return shape, colour


def _chunk_shows(tl: Timeline, frames: list[int], fps: float, shape: str | None, colour: str | None) -> bool:
    for k in frames:
        for o in tl.objects_at(k / fps):
            if (shape is None or o.shape == shape) and (colour is None or o.colour == colour):
                return True
    return False


class _Batcher:
    """Turns samples into model inputs laid out like the engine's answer context."""

    def __init__(self, adapter: QwenVLAdapter, data: _Data):
        self.a = adapter
        self.data = data
        tok = adapter.tokenizer
        self.sink_ids = tok.encode(adapter.sink_text, add_special_tokens=False)
        self.end_id = tok.convert_tokens_to_ids("<|im_end|>")
        self.pad_id = tok.convert_tokens_to_ids("<|endoftext|>")
        self.merge = int(adapter.video_processor.merge_size)

    def build(self, samples: list[dict]) -> dict:
        a, tok = self.a, self.a.tokenizer
        rows, labels, pixels, grids, chunk_spans, chunk_meta = [], [], [], [], [], []
        for si, s in enumerate(samples):
            ids = list(self.sink_ids)
            for frames in s["chunks"]:
                video = a.video_processor(videos=[np.stack([self.data.frame(s["ti"], k) for k in frames])],
                                          return_tensors="pt", do_sample_frames=False, cap_pixels_per_frame=True)
                grid = video["video_grid_thw"]
                n = int(grid.prod()) // (self.merge ** 2)
                chunk_spans.append((si, len(ids) + 1, len(ids) + 1 + n))
                chunk_meta.append((s["ti"], frames))
                ids += [a._vision_start] + [a._video_pad] * n + [a._vision_end]
                pixels.append(video["pixel_values_videos"])
                grids.append(grid)
            lab = [-100] * len(ids)
            # the engine's prompt with earlier turns as dialogue (`adapter.prompt`), answers labelled; special
            # tokens split the text, so the pieces tokenize exactly as the whole string does
            for n, (question, answer) in enumerate(s["turns"]):
                prompt = tok.encode(("\n<|im_start|>user\n" if n else "") + a.prompt(question),
                                    add_special_tokens=False)
                answer_ids = tok.encode(answer, add_special_tokens=False) + [self.end_id]
                lab += [-100] * len(prompt) + answer_ids
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
            types = (ids == a._video_pad).int() * 2
            n_chunks = int((ids == a._vision_start).sum())
            p, _ = a.model.model.get_rope_index(ids, mm_token_type_ids=types, video_grid_thw=grid_all[g:g + n_chunks],
                                                second_per_grid_ts=torch.ones(n_chunks))
            g += n_chunks
            input_ids[i, :len(r)] = ids[0]
            label_t[i, :len(r)] = torch.tensor(lab)
            mask[i, :len(r)] = 1
            pos[:, i, :len(r)] = p[:, 0]
        questions = [tok.encode(s["question"], add_special_tokens=False) for s in samples]  # the last turn
        return {"input_ids": input_ids, "labels": label_t, "attention_mask": mask, "position_ids": pos,
                "pixel_values_videos": torch.cat(pixels), "video_grid_thw": grid_all,
                "chunk_spans": chunk_spans, "chunk_meta": chunk_meta, "questions": questions, "samples": samples}


def _question_vectors(model, questions: list[list[int]]) -> torch.Tensor:
    """Layer-0 mean pre-RoPE queries, heads averaged per KV group: (n, kv_heads * head_dim)."""
    lm = model.model.language_model
    layer = lm.layers[0]
    cfg = model.config.get_text_config()
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    out = []
    for q in questions:
        h = layer.input_layernorm(lm.embed_tokens(torch.tensor(q)))
        v = layer.self_attn.q_proj(h).mean(0)
        out.append(v.view(kv, heads // kv, -1).mean(1).reshape(-1))
    return torch.stack(out)


def train(cfg: TrainConfig) -> dict:
    """Build a fresh tiny checkpoint, train it, save it to cfg.out_dir with a training record."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    out = Path(cfg.out_dir)
    build_tiny_checkpoint(out, seed=cfg.seed, hidden=cfg.hidden, layers=cfg.layers, frame_px=cfg.frame_px)
    adapter = QwenVLAdapter(str(out))
    model = adapter.model
    model.train()
    data = _Data(cfg, rng)
    batcher = _Batcher(adapter, data)
    steps = cfg.steps or 1800
    captured: list[torch.Tensor] = []
    hook = model.model.language_model.layers[0].self_attn.k_proj.register_forward_hook(
        lambda _m, _i, o: captured.append(o))
    # auxiliary probe on pooled vision features (training only, not saved): which colour-shape pairs each chunk
    # shows and how many objects; a dense signal that teaches the vision tower to see long before answers do
    merged: list[torch.Tensor] = []
    vision_hook = model.model.visual.merger.register_forward_hook(lambda _m, _i, o: merged.append(o))
    aux_head = torch.nn.Linear(model.config.get_text_config().hidden_size, len(PAIRS) + 4)
    opt = torch.optim.AdamW([*model.parameters(), *aux_head.parameters()], lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    t0 = time.perf_counter()
    history = []
    step = 0
    for step in range(steps):
        # the window length varies by batch (short windows are easier and cheaper; the engine's is the longest)
        w = cfg.window_blocks if rng.random() < 0.3 else int(rng.integers(2, cfg.window_blocks + 1))
        batch = batcher.build([data.sample(w) for _ in range(cfg.batch)])
        captured.clear()
        merged.clear()
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"], pixel_values_videos=batch["pixel_values_videos"],
                       video_grid_thw=batch["video_grid_thw"]).logits
        lm_loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1))
        c_loss = _contrastive(model, batch, captured[0], data)
        v_loss = _vision_aux(aux_head, merged[0], batch, data)
        loss = lm_loss + cfg.contrastive_weight * c_loss + v_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % cfg.log_every == 0 or step == steps - 1:
            rec = {"step": step, "lm_loss": round(lm_loss.item(), 4), "contrastive": round(c_loss.item(), 4),
                   "vision_aux": round(v_loss.item(), 4),
                   "elapsed_s": round(time.perf_counter() - t0, 1)}
            history.append(rec)
            log.warning("train %s", rec)
        if time.perf_counter() - t0 > cfg.time_budget_s:
            log.warning("time budget of %.0f s reached at step %d", cfg.time_budget_s, step)
            break
        if step and step % 500 == 0:
            _save(model, out)
    hook.remove()
    vision_hook.remove()
    model.eval()
    _save(model, out)
    record = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
              "steps_done": step + 1, "train_s": round(time.perf_counter() - t0, 1), "history": history}
    (out / "training.json").write_text(json.dumps(record, indent=1))
    return record


def _save(model, out: Path) -> None:
    """Weights in bfloat16 (half the bytes; the adapter loads them as float32 on a CPU)."""
    model.save_pretrained(out, state_dict={k: v.detach().to(torch.bfloat16) for k, v in model.state_dict().items()})


PAIRS = [(c, s) for c in COLOURS for s in SHAPES]


def _vision_aux(head: torch.nn.Linear, merged: torch.Tensor, batch: dict, data: _Data) -> torch.Tensor:
    """BCE on the colour-shape pairs each chunk shows + cross-entropy on its object count, from the mean of the
    chunk's merged vision tokens."""
    sizes = (batch["video_grid_thw"].prod(-1) // 4).tolist()
    pooled = torch.stack([t.mean(0) for t in merged.split(sizes)])
    logits = head(pooled)
    present = torch.zeros(len(sizes), len(PAIRS))
    count = torch.zeros(len(sizes), dtype=torch.long)
    for i, (ti, frames) in enumerate(batch["chunk_meta"]):
        tl = data.timelines[ti]
        for k in frames:
            objs = tl.objects_at(k / data.cfg.fps)
            for o in objs:
                present[i, PAIRS.index((o.colour, o.shape))] = 1.0
        count[i] = min(len(objs), 3)
    return (F.binary_cross_entropy_with_logits(logits[:, :len(PAIRS)], present)
            + F.cross_entropy(logits[:, len(PAIRS):], count))


def _contrastive(model, batch: dict, keys: torch.Tensor, data: _Data) -> torch.Tensor:
    """Multi-positive InfoNCE between question vectors and block vectors (cosine, scale 20)."""
    spans = batch["chunk_spans"]
    blocks = torch.stack([keys[si, a:b].mean(0) for si, a, b in spans])
    blocks = F.normalize(blocks, dim=-1)
    qs = F.normalize(_question_vectors(model, batch["questions"]), dim=-1)
    sim = 20.0 * qs @ blocks.T  # (questions, blocks)
    losses = []
    for qi, s in enumerate(batch["samples"]):
        shape, colour = _mentions(s["question"])
        if shape is None and colour is None:
            continue
        pos = torch.tensor([_chunk_shows(data.timelines[ti], frames, data.cfg.fps, shape, colour)
                            for ti, frames in batch["chunk_meta"]])
        if pos.any() and not pos.all():
            losses.append(torch.logsumexp(sim[qi], 0) - torch.logsumexp(sim[qi][pos], 0))
    return torch.stack(losses).mean() if losses else sim.sum() * 0.0
