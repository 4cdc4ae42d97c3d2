"""The vision tower's training: the warm-up of a fresh retrain, the refinement of a checkpoint's tower, their dense
per-cell targets (`Readout`), grid scenes to train on, and the check of how well the tokens name their cells.

ShapesWorld puts every object inside one cell of the model's merged-token grid (`synth.world`), so each merged
vision token shows at most one object, and dense targets say per token which shape and which colour it shows."""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from streamvid.synth.world import BACKGROUNDS, CELL_PX, COLOURS, JITTER_PX, SHAPES, SIZE_RANGE, Obj, draw

from .config import CONFUSABLE, TrainConfig

log = logging.getLogger("streamvid.training.train_tiny")


class Readout(torch.nn.Module):
    """The vision warm-up's targets, per merged vision token: which shape and which colour cover its cell (or
    none: softmax classes, so every occupied cell gets the full gradient of its shape), and per chunk the object
    count (0-3) from the mean of its tokens."""

    def __init__(self, dim: int):
        super().__init__()
        self.shape = torch.nn.Linear(dim, 1 + len(SHAPES))
        self.colour = torch.nn.Linear(dim, 1 + len(COLOURS))
        self.count = torch.nn.Linear(dim, 4)

    def loss(self, merged: torch.Tensor, cells: list[np.ndarray], counts: list[int]) -> torch.Tensor:
        shapes, colours = cell_classes(np.concatenate(cells))
        pooled = torch.stack([t.mean(0) for t in merged.split([len(c) for c in cells])])
        return (F.cross_entropy(self.shape(merged), torch.from_numpy(shapes))
                + F.cross_entropy(self.colour(merged), torch.from_numpy(colours))
                + F.cross_entropy(self.count(pooled), torch.tensor(counts)))


def cell_classes(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cells, colours + shapes) bool -> each cell's shape class and colour class, 0 for none (a cell two objects
    covered within one chunk takes the first)."""
    n = len(COLOURS)
    colours, shapes = cells[:, :n], cells[:, n:]
    return (np.where(shapes.any(1), shapes.argmax(1) + 1, 0).astype(np.int64),
            np.where(colours.any(1), colours.argmax(1) + 1, 0).astype(np.int64))


@torch.no_grad()
def align_words(embed: torch.nn.Embedding, words: torch.Tensor, readout: Readout) -> None:
    """Give each colour and shape word the direction of its detector in the readout, at the embeddings' usual norm:
    a vision token showing a red circle then points along the input embeddings of " red" and " circle", so the
    question's words match what was seen by plain attention, and by the layer-0 retrieval vectors."""
    detectors = torch.cat([readout.colour.weight[1:], readout.shape.weight[1:]])
    norm = embed.weight.norm(dim=-1).mean()
    embed.weight[words] = F.normalize(detectors, dim=-1) * norm


def grid_scene(rng: np.random.Generator, px: int, confusable_frac: float = 0.0) -> tuple[np.ndarray, np.ndarray, int]:
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
    """n random grid scenes (`grid_scene`), each held still for one chunk of `frames_per_chunk` frames: the processor's
    inputs for them, their cell labels and their object counts."""
    frames, cells, counts = zip(*[grid_scene(rng, px, confusable_frac) for _ in range(n)])
    return video_inputs(processor, [np.stack([f] * frames_per_chunk) for f in frames]), list(cells), list(counts)


def video_inputs(processor, videos: list[np.ndarray]) -> dict:
    """The video processor's inputs for (frames, H, W, 3) chunks, called as the engine's adapter calls it."""
    return processor(videos=videos, return_tensors="pt", do_sample_frames=False, cap_pixels_per_frame=True)


def warmup_optimizer(model, readout: Readout, cfg: TrainConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW([*model.model.visual.parameters(), *readout.parameters()], lr=2 * cfg.lr,
                             weight_decay=0.0)


def vision_warmup(model, processor, cfg: TrainConfig, rng: np.random.Generator, readout: Readout, data,
                   opt: torch.optim.Optimizer, history: list[dict], start: int = 0,
                   after_step: Callable[[int], None] | None = None) -> None:
    """The vision tower alone with dense targets (`Readout`), so that the language model learns on vision tokens
    that already tell shapes and colours apart. Steps alternate between freshly drawn single-frame grid scenes and
    chunks of the training timelines as the engine decodes them (compression, and objects that hop within a
    chunk, included). From step `start` (a resumed run); `after_step(steps done)` after each step (checkpoints)."""
    t0 = time.perf_counter()
    fpc = cfg.frames_per_chunk
    for step in range(start, cfg.vision_warmup_steps):
        if step % 2 == 0:
            video, attributes, counts = scene_batch(processor, rng, cfg.warmup_scenes, cfg.frame_px, fpc)
        else:
            chunks = []
            for _ in range(cfg.warmup_scenes):
                ti = int(rng.choice(data.train_ids))
                c = int(rng.integers(data.timelines[ti].n_frames // fpc))
                chunks.append((ti, data.chunk_frames(c)))
            video = video_inputs(processor, [np.stack([data.frame(ti, k) for k in ks]) for ti, ks in chunks])
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
        if after_step is not None:
            after_step(step + 1)


def vision_refine(model, processor, cfg: TrainConfig, rng: np.random.Generator, readout: Readout) -> list[dict]:
    """Train a checkpoint's tower on: `Readout` fitted on its frozen tokens first (200 steps), then tower and
    readout together on fresh grid scenes (a `confusable_frac` share showing a CONFUSABLE shape), plus an anchor:
    the squared distance of the tokens to those of the tower as loaded, relative to their mean square. The anchor
    keeps the tokens where the checkpoint's language model reads them, so what the refinement adds (telling a
    circle from a hexagon) reaches answers without relearning to read."""
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


def freeze_tower(model, train_merger: bool, round_weights: bool = True) -> None:
    """The tower at the weights the engine will run (saved in bfloat16, loaded as float32) and frozen; with
    `train_merger` its merger trains on from those weights. A resumed run keeps the weights of its state as they
    are (`round_weights` False): a merger that trained has float32 weights there."""
    for p in model.model.visual.parameters():
        p.requires_grad_(False)
        if round_weights:
            p.data = p.data.to(torch.bfloat16).float()
    if train_merger:
        model.model.visual.merger.requires_grad_(True)


def readout_loss(readout: Readout, data, batch: dict) -> torch.Tensor:
    """The warm-up's dense targets on the batch's vision tokens (live ones, where the merger trains): per cell its
    shape and colour, per chunk its count."""
    spans = [b - a for _, a, b in batch["chunk_spans"]]
    cells = [data.cell_attributes(ti, frames) for ti, frames in batch["chunk_meta"]]
    counts = [min(len(data.timelines[ti].objects_at(frames[-1] / data.cfg.fps)), 3) for ti, frames in
              batch["chunk_meta"]]
    if any(n != len(c) for n, c in zip(spans, cells)):
        raise ValueError("vision tokens do not match the cell grid")
    return readout.loss(batch["chunk_embeds"], cells, counts)


@torch.no_grad()
def vision_check(data, readout: Readout) -> dict:
    """How well the tower's tokens name what their cells show, on the held-out timelines' decoded chunks (with the
    merger as it is now, where it trains): of the cells an object covers, the share whose shape (colour) the
    warm-up's readout names right."""
    right_shape, right_colour = [], []
    for ti in data.eval_ids:
        tokens = data.all_tokens(ti)
        tokens = tokens.reshape(-1, tokens.shape[-1])
        shapes, colours = cell_classes(np.concatenate([data.cell_attributes(ti, data.chunk_frames(c))
                                                   for c in range(data.n_chunks(ti))]))
        occupied = shapes > 0
        right_shape.append((readout.shape(tokens).argmax(-1).numpy() == shapes)[occupied])
        right_colour.append((readout.colour(tokens).argmax(-1).numpy() == colours)[occupied])
    return {"colour": round(float(np.concatenate(right_colour).mean()), 4),
            "shape": round(float(np.concatenate(right_shape).mean()), 4)}
