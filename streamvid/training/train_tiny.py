"""`streamvid train-tiny`: train the bundled ShapesWorld model, a small Qwen2.5-VL, from scratch on a CPU.

Every training sample is laid out exactly as the engine lays out an answer context (`positions.layout`,
`Reasoning.begin`): sinks (system prompt), retrieved memory blocks in time order, the recent window of blocks, then
the engine's prompt: the stream's earlier (question, answer) turns and the question (`data.py`). The earlier turns
were asked at EARLIER moments of the stream and carry the answers that were right then, so an answer about now has
to follow the frames, not the dialogue; a question that names a time, and a trigger probe, comes without dialogue,
as the engine asks it. Samples mix 0, 1 and 2 earlier turns (the engine keeps 2).

ShapesWorld puts every object inside one cell of the model's merged-token grid (`synth.world`), so each vision
token shows at most one object. Training runs in two stages.

1. The vision tower learns alone for `vision_warmup_steps` steps with dense per-cell targets (`vision.py`). Each
   colour and shape word's input embedding then takes the direction of its detector (`align_words`). The tower's
   blocks are then frozen at the weights the engine will run, and their output for every chunk of every timeline
   is computed once (`TrainingData.encode_chunks`).
2. The language model learns on those tokens, at text speed, from:
   - next-token loss on the answer to the sample's question (`batcher.py`);
   - where to look (`attention_loss`, two hops: words -> the objects they name, answer -> the words);
   - retrieval (`retrieval.py`): the layer-0 keys of the blocks against the question's mean layer-0 query, in the
     batch, and, for the block side, names against one stream's past as memory holds it (`bank_loss`).
   The block side (`block_side`, on for a fresh retrain): the tower's merger, the layer that makes each merged
   token from its 2x2 patches, trains on with the language model that reads its tokens and with layer 0's
   `k_proj`, on the frozen blocks' outputs computed once (a small MLP per chunk: cheap on a CPU, where recomputing
   a tower block per sampled chunk is not), held to the warm-up's cell targets (`readout_weight`). A linear
   readout names a hexagon cell from the tokens, but the keys of layer 0, a linear map of them, did not hold
   "hexagon" in one direction; the merger is the last place before them where it can be made to.
   The learning rate follows a cosine over the main steps or the time budget, whichever runs out first. The first
   `short_window_frac` of that progress sees 1-3 window blocks. Held-out checks every `eval_every` steps:
   teacher-forced answers alone and after two earlier turns, and per-name retrieval recall (`retrieval_check`).

Training is resumable (`checkpoint.py`): the state is written at each stage's start, at least every
`checkpoint_every_s` seconds, and at the end; `resume(out)` (`python -m streamvid.training --resume DIR`) continues
from the last one, bit-exactly where the schedule is bound by steps (a time-bound schedule follows the wall clock,
summed over the runs).

`init_from` fine-tunes an earlier checkpoint instead: no warm-up, its word embeddings as they are, its tower as it is
(block side off by default) unless `vision_refine_steps` > 0: then the tower first learns on for that many steps with
the warm-up's dense targets on fresh grid scenes, anchored to its tokens (`vision_refine`). With `steps` 0 that is
the only stage, and only the held-out timelines of the vision check are built.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from streamvid.adapters.qwen2_5_vl import QwenVLAdapter
from streamvid.checkpoints.tiny import build_tiny_checkpoint
from streamvid.synth.world import CELL_PX, COLOURS, SHAPES

from . import checkpoint as ckpt
from . import heard
from .batcher import Batcher, attention_loss, forward
from .config import (ASKED_ALOUD, CONFUSABLE, FAMILY_WEIGHTS, N_EVAL_TIMELINES, PROBE_TEMPLATE, REALTIME,
                     TrainConfig, config_json)
from .data import TrainingData, probe_edge
from .retrieval import bank_loss, contrastive_loss, retrieval_check
from .vision import (
    Readout,
    align_words,
    cell_classes,
    freeze_tower,
    grid_scene,
    readout_loss,
    scene_batch,
    vision_check,
    vision_refine,
    vision_warmup,
    warmup_optimizer,
)

__all__ = ["CELL_PX", "CONFUSABLE", "FAMILY_WEIGHTS", "N_EVAL_TIMELINES", "PROBE_TEMPLATE", "REALTIME", "TrainConfig",
           "Batcher", "TrainingData", "Readout", "attention_loss", "cell_classes", "grid_scene", "forward",
           "probe_edge", "resume", "scene_batch", "train"]

log = logging.getLogger(__name__)


class _Checkpointer:
    """Writes the resumable state (and the bfloat16 weights, so the folder always holds a loadable model) when
    `checkpoint_every_s` has passed since the last write, or every `checkpoint_every_steps` main steps."""

    def __init__(self, out: Path, cfg: TrainConfig, model, readout, rng, history: list, previous: dict | None):
        self.out, self.cfg, self.model, self.readout, self.rng = out, cfg, model, readout, rng
        self.history, self.previous = history, previous
        self.last = time.perf_counter()

    def save(self, stage: str, step: int, opt, elapsed_s: float = 0.0) -> None:
        ckpt.save_state(self.out, stage=stage, step=step, cfg=self.cfg, model=self.model, readout=self.readout,
                        opt=opt, rng=self.rng, history=self.history, elapsed_s=elapsed_s, previous=self.previous)
        _save(self.model, self.out)
        self.last = time.perf_counter()

    def maybe(self, stage: str, step: int, opt, elapsed_s: float = 0.0) -> None:
        every = self.cfg.checkpoint_every_steps
        if (time.perf_counter() - self.last >= self.cfg.checkpoint_every_s
                or (stage == "main" and every and step % every == 0)):
            self.save(stage, step, opt, elapsed_s)


def resume(out_dir: Path, time_budget_s: float | None = None) -> dict:
    """Continue the training whose state is in `out_dir` (see `checkpoint.py`) from its last checkpoint, with the
    config it was started with (`time_budget_s` may extend the main-training budget)."""
    meta, tensors = ckpt.load_state(Path(out_dir))
    if meta["stage"] == "done":
        raise ValueError(f"the training in {out_dir} finished ({meta['step']} main steps): nothing to resume")
    cfg = ckpt.state_config(meta, Path(out_dir))
    if time_budget_s is not None:
        cfg = replace(cfg, time_budget_s=time_budget_s)
    return train(cfg, _state=(meta, tensors))


def heard_questions(out: Path, data: TrainingData, seed: int) -> dict[str, list[str]]:
    """The training's user questions as the default recogniser hears them said (`heard.py`): read from
    out/heard_questions.json, built there the first time (about 6 minutes: each question in three voices)."""
    path = out / "heard_questions.json"
    if path.is_file():
        return heard.load(path)
    from streamvid.audio.asr import load_recognizer
    from streamvid.audio.voices import available_voices, load_voice
    from streamvid.config import DEFAULTS

    voices = heard.training_voices([load_voice(name) for name in available_voices()])
    if not voices:
        raise ValueError("heard questions need a voice to say them: install espeak-ng")
    families = [f for f in ASKED_ALOUD if f in data.cfg.families]
    texts = heard.question_texts(data.draw_question, families, np.random.default_rng([seed, 1]))
    t0 = time.perf_counter()
    table = heard.hear_questions(texts, load_recognizer(), voices, DEFAULTS.wake_word,
                                 np.random.default_rng([seed, 2]))
    heard.save(table, path)
    log.warning("train %s", {"heard_questions": len(table), "voices": [f"{v.name}:{var}" for v, var in voices],
                              "heard_as_written": sum(f == t for t, fs in table.items() for f in fs),
                              "heard": sum(len(fs) for fs in table.values()), "s": round(time.perf_counter() - t0)})
    return table


def train(cfg: TrainConfig, _state: tuple[dict, dict] | None = None) -> dict:
    """Build a fresh tiny checkpoint (or copy `init_from`), train it, save it to cfg.out_dir with a training record
    (`_state`: a checkpoint's to continue from, see `resume`)."""
    t_run = time.perf_counter()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    out = Path(cfg.out_dir)
    meta, tensors = _state if _state is not None else (None, None)
    previous = None if meta is None else meta["fine_tuned_from"]
    if meta is not None:
        pass  # the folder holds the model's files already; the weights come from the state
    elif cfg.init_from is not None:  # fine-tune: the checkpoint's files, its record kept
        init = Path(cfg.init_from)
        if not (init / "config.json").is_file():
            raise ValueError(f"no checkpoint to fine-tune in {init}")
        if init.resolve() != out.resolve():
            shutil.copytree(init, out, dirs_exist_ok=True)
            shutil.rmtree(out / ckpt.STATE_DIR, ignore_errors=True)  # not the state of the run that made it
        if (out / "training.json").is_file():
            previous = json.loads((out / "training.json").read_text())
    else:
        build_tiny_checkpoint(out, seed=cfg.seed, hidden=cfg.hidden, layers=cfg.layers, frame_px=cfg.frame_px)
    adapter = QwenVLAdapter(str(out))
    model = adapter.model
    model.train()
    steps = 6000 if cfg.steps is None else cfg.steps
    # a fine-tune without main steps (the tower refined alone) reads only the held-out timelines (its vision check)
    data = TrainingData(replace(cfg, n_timelines=0) if steps == 0 and cfg.init_from is not None else cfg, rng)
    if cfg.heard_p > 0 and steps > 0:
        data.heard = heard_questions(out, data, cfg.seed)
    batcher = Batcher(adapter, data)
    eval_sets = {"held_out": data.eval_set(cfg.eval_samples), "held_out_dialogue": data.eval_set(cfg.eval_samples, 2)}
    model.set_attn_implementation("eager")  # the attention loss reads the attention weights
    captured: list[torch.Tensor] = []
    hook = model.model.language_model.layers[0].self_attn.k_proj.register_forward_hook(
        lambda _m, _i, o: captured.append(o))
    # the vision warm-up's dense signals (its readout heads are for training only and are not saved)
    tok = adapter.tokenizer
    words = torch.tensor([tok.convert_tokens_to_ids(tok.tokenize(" " + w))[0] for w in [*COLOURS, *SHAPES]])
    readout = Readout(model.config.vision_config.out_hidden_size)
    history: list[dict] = []
    stage, start = "warmup", 0
    if meta is not None:
        ckpt.restore_modules(tensors, model, readout)
        history += meta["history"]
        stage, start = meta["stage"], meta["step"]
        history.append({"resumed": stage, "at_step": start})
        log.warning("train %s", history[-1])
    saver = _Checkpointer(out, cfg, model, readout, rng, history, previous)
    if cfg.init_from is None and stage == "warmup":
        opt = warmup_optimizer(model, readout, cfg)
        if meta is not None:
            ckpt.restore_optimizer(meta, tensors, opt)
            ckpt.restore_rng(meta, tensors, rng)
        if cfg.vision_warmup_steps > 0:
            vision_warmup(model, adapter.video_processor, cfg, rng, readout, data, opt, history, start,
                           lambda done: saver.maybe("warmup", done, opt))
        align_words(model.get_input_embeddings(), words, readout)
    elif cfg.init_from is not None and cfg.vision_refine_steps > 0 and meta is None:
        history += vision_refine(model, adapter.video_processor, cfg, rng, readout)
    tower_trained = cfg.init_from is None or cfg.vision_refine_steps > 0
    block = cfg.trains_block_side and steps > 0
    # from here the tower's blocks are frozen at the weights the engine will run (saved in bfloat16), and their
    # output for every chunk is computed once: the main loop trains the language model (and the merger) alone
    resuming_main = meta is not None and stage == "main"
    freeze_tower(model, block, round_weights=not resuming_main)
    t_enc = time.perf_counter()
    data.encode_chunks(model, adapter.video_processor, merger_inputs=block)
    if block:
        data.merger = model.model.visual.merger
    if not resuming_main:
        with torch.no_grad():
            history.append({"vision_check": vision_check(data, readout) if tower_trained else None,
                            "encode_s": round(time.perf_counter() - t_enc, 1)})
        log.warning("train %s", history[-1])
    # the language model's rate stays low and its weights decayed, or its attention saturates onto a few prompt
    # tokens before it finds what the vision tokens say (a softmax at probability 1 passes no gradient to the
    # keys it ignores); the merger trains at its own rate, without decay
    merger = set(model.model.visual.merger.parameters()) if block else set()
    groups = [{"params": [p for p in model.parameters() if p.requires_grad and p not in merger], "lr_scale": 1.0}]
    if block:
        groups.append({"params": list(model.model.visual.merger.parameters()), "lr_scale": cfg.block_lr_scale,
                       "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
    readout.requires_grad_(False)
    use_readout = block and tower_trained and cfg.readout_weight > 0
    elapsed0 = 0.0
    if resuming_main:
        ckpt.restore_optimizer(meta, tensors, opt)
        ckpt.restore_rng(meta, tensors, rng)
        elapsed0 = meta["elapsed_s"]
    else:
        start = 0
        if steps > 0:
            saver.save("main", 0, opt)
    t0 = time.perf_counter()

    def elapsed() -> float:  # main training, over every run of it
        return elapsed0 + time.perf_counter() - t0

    def progress(step: int) -> float:  # main steps or time budget, whichever runs out first
        return min(1.0, max(step / steps, elapsed() / cfg.time_budget_s))

    done_steps = start
    for step in range(start, steps):
        done = progress(step)
        for group in opt.param_groups:
            group["lr"] = cfg.lr * group["lr_scale"] * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * done))
        # the window length varies by batch: 1-3 blocks at first (few distractors while the model learns to bind
        # what it is asked about to what it sees), then up to and mostly at the engine's length
        if done < cfg.short_window_frac:
            w = int(rng.integers(1, 4))
        else:
            w = cfg.window_blocks if rng.random() < 0.5 else int(rng.integers(2, cfg.window_blocks + 1))
        batch = batcher.build([data.sample(w) for _ in range(cfg.batch)])
        captured.clear()
        res = forward(model, batch, output_attentions=True)
        logits = res.logits
        lm_loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1))
        c_loss = contrastive_loss(model, batch, captured[0], data)
        a_loss = (attention_loss(res.attentions[cfg.word_attention_layer], batch["word_looks"])
                  + attention_loss(res.attentions[cfg.answer_attention_layer], batch["answer_looks"]))
        loss = lm_loss + cfg.contrastive_weight * c_loss + cfg.attention_weight * a_loss
        extra = {}
        if block:
            extra["bank"] = bank_loss(model, data, tok, rng)
            loss = loss + cfg.bank_weight * extra["bank"]
            if use_readout:
                extra["readout"] = readout_loss(readout, data, batch)
                loss = loss + cfg.readout_weight * extra["readout"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
        opt.step()
        done_steps = step + 1
        over_budget = elapsed() > cfg.time_budget_s
        last = step == steps - 1 or over_budget
        if step % cfg.log_every == 0 or last:
            rec = {"step": step, "lm_loss": round(lm_loss.item(), 4), "contrastive": round(c_loss.item(), 4),
                   "attention": round(a_loss.item(), 4), **{k: round(v.item(), 4) for k, v in extra.items()},
                   "elapsed_s": round(elapsed(), 1)}
            if (step and step % cfg.eval_every == 0) or last:
                rec.update(_checks(model, batcher, eval_sets, data, tok))
                model.train()
            history.append(rec)
            log.warning("train %s", rec)
        if over_budget:
            log.warning("time budget of %.0f s reached at step %d", cfg.time_budget_s, step)
            break
        if not last:
            saver.maybe("main", done_steps, opt, elapsed())
    hook.remove()
    model.eval()
    if block and tower_trained:
        with torch.no_grad():
            history.append({"vision_check_end": vision_check(data, readout)})
    if steps > 0:
        saver.save("done", done_steps, opt, elapsed())  # the bfloat16 weights too
    else:
        _save(model, out)
    record = {"config": config_json(cfg), "steps_done": done_steps, "train_s": round(time.perf_counter() - t_run, 1),
              "main_s": round(elapsed(), 1), "history": history}
    if previous is not None:
        record["fine_tuned_from"] = previous
    (out / "training.json").write_text(json.dumps(record, indent=1))
    return record


def _checks(model, batcher: Batcher, eval_sets: dict, data: TrainingData, tok) -> dict:
    """The held-out checks: per family, teacher-forced answers alone and after two earlier turns; per name,
    memory's retrieval recall (`retrieval_check`)."""
    out = {name: _evaluate(model, batcher, samples) for name, samples in eval_sets.items()}
    out["retrieval"] = retrieval_check(model, data, tok)
    return out


@torch.no_grad()
def _evaluate(model, batcher: Batcher, samples: list[dict], batch: int = 8) -> dict:
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
