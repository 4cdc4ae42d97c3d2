"""Retrieval training and its held-out check.

Memory finds a block by the layer-0 pre-RoPE keys of its video tokens and a question by the mean layer-0 pre-RoPE
query of its words (GQA heads averaged; `adapters/hf.py`). Nothing mixes tokens before layer 0's projections, so
a vision token's key is `k_proj(input_layernorm(token))` wherever it sits: the same here as in the engine, and
computable from the training tokens alone (`layer0_keys`).

Two losses, both multi-positive InfoNCE (scale 20) on blocks scored as memory scores them ((cosine to the mean key
+ REGION_WEIGHT x the best region's cosine) / (1 + REGION_WEIGHT)):
- `contrastive_loss`: the batch's questions against the batch's blocks;
- `bank_loss`, the block side's: names ("what colour was the hexagon?") against one stream's past as memory holds
  it (every block that shows a name among `bank_blocks` of the blocks out of the window), the stream's own
  look-alikes as negatives. With the tower's merger training, the gradient reaches the tokens themselves.
`retrieval_check` measures per-name recall on the held-out timelines, as `benchmarks/retrieval_by_name.py` does on a
score run (`retrieval_recall`)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from streamvid.adapters.embedders import REGION_WEIGHT
from streamvid.adapters.qwen2_5_vl import mean_queries
from streamvid.adapters.vectors import region_pool, unit
from streamvid.synth.questions import FAMILIES, frames_show, mentions
from streamvid.synth.world import CELL_PX, SHAPES

from .config import SPEECH
from .data import NAMES
from .retrieval_recall import RecallTally, engine_rows

MEMORY_FAMILIES = ("backward_colour", "backward_shape")


def name_question(name: str, variant: int = 0) -> str:
    """A memory question that names `name`, in the words of `synth.questions` (backward_colour for a shape,
    backward_shape for a colour)."""
    if name in SHAPES:
        return ("What colour was the {}?", "What was the colour of the {}?")[variant % 2].format(name)
    return ("Which shape was {}?", "What shape was {}?")[variant % 2].format(name)


def layer0_keys(model, tokens: torch.Tensor) -> torch.Tensor:
    """(..., n, kv_heads * head_dim): the pre-RoPE keys that decoder layer 0 makes of vision tokens (..., n, hidden)
    placed in the video slots, as the engine's memory indexes them."""
    layer = model.model.language_model.layers[0]
    return layer.self_attn.k_proj(layer.input_layernorm(tokens))


def block_scores(qs: torch.Tensor, keys: list[torch.Tensor] | torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
    """(questions, blocks): unit question vectors against blocks given by their video tokens' keys, scored as
    memory scores them."""
    means = F.normalize(torch.stack([k.mean(0) for k in keys]), dim=-1)
    regions = F.normalize(torch.stack([region_pool(k, grid) for k in keys]), dim=-1)  # (blocks, regions, dim)
    best = torch.einsum("qd,brd->qbr", qs, regions).amax(-1)
    return (qs @ means.T + REGION_WEIGHT * best) / (1 + REGION_WEIGHT)


def _grid(data) -> tuple[int, int, int]:
    cells = data.cfg.frame_px // CELL_PX  # the merged video tokens: temporal patches x cell grid
    return int(data.chunk_grid[0, 0]), cells, cells


def _infonce(sim: torch.Tensor, positives: torch.Tensor) -> torch.Tensor | None:
    if positives.any() and not positives.all():
        return torch.logsumexp(sim, 0) - torch.logsumexp(sim[positives], 0)
    return None


def contrastive_loss(model, batch: dict, keys: torch.Tensor, data) -> torch.Tensor:
    """The batch's questions against the batch's blocks; keys: layer 0's (batch, L, dim) keys of the forward."""
    qs = F.normalize(mean_queries(model, batch["questions"], 0), dim=-1)
    sim = 20.0 * block_scores(qs, [keys[si, a:b] for si, a, b in batch["chunk_spans"]], _grid(data))
    losses = []
    for qi, s in enumerate(batch["samples"]):
        if s["family"] in SPEECH:  # found among the speech blocks by its words (speech_index), not by the frames
            continue
        shape, colour = mentions(s["question"])
        if shape is None and colour is None:
            continue
        pos = torch.tensor([frames_show(data.timelines[ti], frames, shape, colour)
                            for ti, frames in batch["chunk_meta"]])
        if (loss := _infonce(sim[qi], pos)) is not None:
            losses.append(loss)
    return torch.stack(losses).mean() if losses else sim.sum() * 0.0


def bank_loss(model, data, tokenizer, rng: np.random.Generator) -> torch.Tensor:
    """Up to `bank_names` names shown by some of one training stream's blocks out of the window at a random moment,
    each asked as a memory question against `bank_blocks` of those blocks: every block that shows one of the names
    (up to 8 a name) and random others."""
    cfg = data.cfg
    ti = int(rng.choice(data.train_ids))
    n_chunks = data.n_chunks(ti)
    lo = cfg.window_blocks + 2 * cfg.top_k
    if n_chunks <= lo:
        return model.get_input_embeddings().weight.sum() * 0.0
    n_past = int(rng.integers(lo, n_chunks + 1)) - cfg.window_blocks  # blocks that have left the window
    shown = data.chunk_names(ti)[:n_past]
    candidates = np.flatnonzero((shown.sum(0) > 0) & (shown.sum(0) < n_past))
    if not len(candidates):
        return model.get_input_embeddings().weight.sum() * 0.0
    names = rng.choice(candidates, min(cfg.bank_names, len(candidates)), replace=False)
    chosen: set[int] = set()
    for j in names:
        pos = np.flatnonzero(shown[:, j])
        chosen.update(int(c) for c in rng.choice(pos, min(8, len(pos)), replace=False))
    rest = np.array([c for c in range(n_past) if c not in chosen])
    if len(rest) and cfg.bank_blocks > len(chosen):
        chosen.update(int(c) for c in rng.choice(rest, min(cfg.bank_blocks - len(chosen), len(rest)), replace=False))
    idx = sorted(chosen)
    tokens = data.merged(ti, idx) if data.merger is not None else data.tokens[ti][idx]
    keys = layer0_keys(model, tokens)
    texts = [name_question(NAMES[j], int(rng.integers(2))) for j in names]
    qs = F.normalize(mean_queries(model, [tokenizer.encode(t, add_special_tokens=False) for t in texts], 0), dim=-1)
    sim = 20.0 * block_scores(qs, list(keys), _grid(data))
    positives = torch.from_numpy(shown[idx][:, names].T.copy())  # (names, blocks)
    losses = [loss for q in range(len(names)) if (loss := _infonce(sim[q], positives[q])) is not None]
    return torch.stack(losses).mean() if losses else sim.sum() * 0.0


@torch.no_grad()
def retrieval_check(model, data, tokenizer, every_s: float = 5.0, names_every_s: float = 30.0) -> dict:
    """Per-name recall of memory's top k on the held-out timelines, with the engine's block rows
    (`retrieval_recall.engine_rows`) and question vectors: the memory families' questions (backward colour and
    shape, drawn every `every_s` seconds with a fixed seed, as a score run asks them) and, every `names_every_s`,
    one question per name that some but not all of the blocks out of the window show (task "name")."""
    cfg = data.cfg
    chunk_s = cfg.frames_per_chunk / cfg.fps
    window_s = cfg.window_blocks * chunk_s
    tally = RecallTally(cfg.top_k)
    rng = np.random.default_rng(777)
    vectors: dict[str, np.ndarray] = {}

    def vector(text: str) -> np.ndarray:
        if text not in vectors:
            vectors[text] = unit(mean_queries(model, [tokenizer.encode(text, add_special_tokens=False)], 0)[0])
        return vectors[text]

    for ti in data.eval_ids:
        tl = data.timelines[ti]
        keys = layer0_keys(model, data.all_tokens(ti))
        rows = [engine_rows(k, _grid(data)) for k in keys]
        shown = data.chunk_names(ti)
        for i, t in enumerate(np.arange(window_s + every_s, tl.duration_s, every_s)):
            n = int(t // chunk_s) - cfg.window_blocks  # blocks out of the window
            for family in MEMORY_FAMILIES:
                if (qa := FAMILIES[family](tl, float(t), rng, window_s)) is not None:
                    shape, colour = mentions(qa.text)
                    name = shape or colour
                    tally.add(family, name, rows[:n], shown[:n, NAMES.index(name)], vector(qa.text))
            if (i * every_s) % names_every_s < 1e-6:
                for j, name in enumerate(NAMES):
                    if 0 < shown[:n, j].sum() < n:
                        tally.add("name", name, rows[:n], shown[:n, j], vector(name_question(name)))
    return tally.summary()
