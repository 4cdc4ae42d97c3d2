"""Qwen2.5-VL and Qwen2-VL through transformers: chunk-by-chunk video prefill with explicit 3-D positions,
text prefill, a manual greedy decode loop, yes/no probes and the model's own retrieval vectors.

Nothing here relies on state the HF model keeps between calls (`rope_deltas`): every forward gets explicit
`position_ids` of shape (3, 1, L). The model is shared by the ingest and reasoning threads; `lock` is held
around each forward, so a long answer interleaves with ingest one decode step at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, DynamicCache
from transformers.utils import logging as hf_logging

from streamvid.adapters.base import Context, Encoded

SUPPORTED_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl")
SYSTEM_PROMPT = "You are a helpful assistant watching a live video stream. Answer briefly from what you saw."


class QwenVLAdapter:
    """See `VideoLLMAdapter`. Thread contract: all public methods are safe from any thread."""

    def __init__(self, model: str, device: str = "cpu", dtype: str = "auto", index_layer: int = 0,
                 trust_remote_code: bool = False):
        hf_logging.disable_progress_bar()
        if dtype == "auto":
            dtype = "bfloat16" if device.startswith("cuda") else "float32"
        try:
            self.processor = AutoProcessor.from_pretrained(model, trust_remote_code=trust_remote_code)
            self.model = AutoModelForImageTextToText.from_pretrained(
                model, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code
            )
        except OSError as e:
            kind = "directory" if Path(model).exists() else "model id (no hub access here: pass a local directory)"
            raise ValueError(f"cannot load model {model!r} as a {kind}: {str(e).splitlines()[0]}") from e
        cfg = self.model.config
        if cfg.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"unsupported model type {cfg.model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        self.model.to(device).eval()
        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype)
        self.lock = threading.RLock()
        self.tokenizer = self.processor.tokenizer
        self.video_processor = self.processor.video_processor
        self.frames_per_chunk_multiple = int(self.video_processor.temporal_patch_size)
        text_cfg = cfg.get_text_config()
        self._lm = self.model.model.language_model
        n_layers = text_cfg.num_hidden_layers
        if not 0 <= index_layer < n_layers:
            raise ValueError(f"index_layer must be in [0, {n_layers}), got {index_layer}")
        self.index_layer = index_layer
        self._attn = self._lm.layers[index_layer].self_attn
        self._kv_heads = text_cfg.num_key_value_heads
        self._heads = text_cfg.num_attention_heads
        self._head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // self._heads
        self.index_dim = self._kv_heads * self._head_dim
        self.rope_inv_freq = self._lm.rotary_emb.inv_freq.detach().float().cpu()
        self._vision_start = cfg.vision_start_token_id
        self._vision_end = cfg.vision_end_token_id
        self._video_pad = cfg.video_token_id
        unk = self.tokenizer.unk_token_id
        self._stop_ids = {i for i in (self.tokenizer.convert_tokens_to_ids("<|im_end|>"),
                                      self.tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                                      self.tokenizer.eos_token_id) if i is not None and i >= 0 and i != unk}
        yes, no = self._word_ids(["yes", "Yes", " yes", " Yes"]), self._word_ids(["no", "No", " no", " No"])
        self._yes_ids, self._no_ids = sorted(yes - no), sorted(no - yes)  # a shared first token says nothing

    # ---- text layout ------------------------------------------------------------------------------------
    @property
    def sink_text(self) -> str:
        return f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n"

    def prompt(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str:
        """Text that follows the video in the context: earlier turns, then the question and the answer header."""
        turns = "".join(f"{q}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n<|im_start|>user\n"
                        for q, a in dialogue)
        return f"{turns}{question}<|im_end|>\n<|im_start|>assistant\n"

    # ---- encoding ---------------------------------------------------------------------------------------
    def encode_text(self, text: str, past: Context | None = None) -> Encoded:
        ids = self._ids(text)
        start = past.next_pos if past is not None else 0
        with self.lock, torch.inference_mode():
            cache = self._forward(ids, self._text_positions(start, ids.shape[1]), past)[1]
        keys, values = self._tail(cache, ids.shape[1])
        return Encoded(keys, values, ids.shape[1], None)

    def encode_chunk(self, frames: Sequence[np.ndarray], past: Context, seconds_per_chunk: float) -> Encoded:
        if len(frames) % self.frames_per_chunk_multiple:
            raise ValueError(f"a chunk needs a multiple of {self.frames_per_chunk_multiple} frames, got {len(frames)}")
        video = self.video_processor(videos=[np.stack(frames)], return_tensors="pt", do_sample_frames=False,
                                     cap_pixels_per_frame=True)
        grid = video["video_grid_thw"]  # (1, 3): temporal, height, width patches
        merge = int(self.video_processor.merge_size)
        n_video = int(grid.prod()) // (merge * merge)
        ids = torch.tensor([[self._vision_start] + [self._video_pad] * n_video + [self._vision_end]])
        types = torch.zeros_like(ids, dtype=torch.int32)
        types[0, 1:-1] = 2
        positions, _ = self.model.model.get_rope_index(
            ids, mm_token_type_ids=types, video_grid_thw=grid,
            second_per_grid_ts=torch.tensor([seconds_per_chunk * self.frames_per_chunk_multiple / len(frames)]),
        )
        span = int(positions.max()) + 1  # the next segment starts after every position this chunk used
        with self.lock, torch.inference_mode(), self._capture("k") as captured:
            cache = self._forward(ids, positions + past.next_pos, past,
                                  pixel_values_videos=video["pixel_values_videos"].to(self.device, self.dtype),
                                  video_grid_thw=grid.to(self.device))[1]
        keys, values = self._tail(cache, ids.shape[1])
        pre_rope_keys = captured[0][0, 1:-1].float()  # (n_video, kv_heads * head_dim)
        return Encoded(keys, values, span, _unit(pre_rope_keys.mean(0)))

    def question_vector(self, text: str) -> np.ndarray:
        """Mean pre-RoPE query of the question's tokens at the index layer, heads averaged within each KV group,
        so it lives in the same space as the blocks' mean pre-RoPE keys. The forward stops at that layer."""
        ids = self._ids(text)
        with self.lock, torch.inference_mode():
            q = mean_queries(self.model, [ids[0].tolist()], self.index_layer, self.device)[0]
        return _unit(q)

    # ---- answering --------------------------------------------------------------------------------------
    def generate(self, context: Context, prompt: str, max_new_tokens: int,
                 stop: threading.Event | None = None) -> Iterator[str]:
        """Prefill `prompt` after `context` and decode greedily, yielding one text piece per generated token."""
        ids = self._ids(prompt)
        pos = context.next_pos
        cache = None
        out: list[int] = []
        shown = ""
        for _ in range(max_new_tokens):
            if stop is not None and stop.is_set():
                return
            with self.lock, torch.inference_mode():
                logits, cache = self._forward(ids, self._text_positions(pos, ids.shape[1]),
                                              context if cache is None else None, cache=cache)
            pos += ids.shape[1]
            token = int(logits[0, -1].argmax())
            if token in self._stop_ids:
                break
            out.append(token)
            text = self.tokenizer.decode(out, skip_special_tokens=True)
            piece = "" if text.endswith("\ufffd") else text[len(shown):]  # "" while a character is incomplete
            shown += piece
            yield piece
            ids = torch.tensor([[token]])

    def probe(self, context: Context, question: str) -> float:
        """p(yes) / (p(yes) + p(no)) for the first answer token after `question`."""
        ids = self._ids(self.prompt(question))
        with self.lock, torch.inference_mode():
            logits = self._forward(ids, self._text_positions(context.next_pos, ids.shape[1]), context)[0]
        p = torch.softmax(logits[0, -1].float(), dim=-1)
        yes, no = float(p[self._yes_ids].sum()), float(p[self._no_ids].sum())
        return yes / (yes + no) if yes + no > 0 else 0.5

    def probe_many(self, context: Context, questions: Sequence[str]) -> list[float]:
        """`probe` for several questions on one context in a single batched forward.

        The prompts are left-padded to one length, so every row's last position is its answer position; the
        context is shared by all rows (expanded, not copied) and an attention mask hides the padding. Each
        prompt keeps the positions it has alone (context.next_pos onwards), so the result equals `probe`."""
        if not questions:
            return []
        rows = [self.tokenizer.encode(self.prompt(q), add_special_tokens=False) for q in questions]
        n, width = len(rows), max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else rows[0][0]
        ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, context.n_tokens + width), dtype=torch.long)
        mask[:, :context.n_tokens] = 1
        positions = torch.zeros((3, n, width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r)
            mask[i, context.n_tokens + width - len(r):] = 1
            positions[:, i, width - len(r):] = torch.arange(len(r)) + context.next_pos
        data = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in zip(context.keys, context.values)]
        with self.lock, torch.inference_mode():
            cache = DynamicCache(ddp_cache_data=data if context.n_tokens else None, config=self.model.config)
            logits = self.model(input_ids=ids.to(self.device), position_ids=positions.to(self.device),
                                attention_mask=mask.to(self.device), cache=cache, use_cache=True,
                                logits_to_keep=1).logits
        p = torch.softmax(logits[:, -1].float(), dim=-1)  # (n, vocab)
        yes, no = p[:, self._yes_ids].sum(-1), p[:, self._no_ids].sum(-1)
        return [float(y / (y + n_)) if y + n_ > 0 else 0.5 for y, n_ in zip(yes, no)]

    # ---- internals --------------------------------------------------------------------------------------
    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, past: Context | None,
                 cache: DynamicCache | None = None, use_cache: bool = True, **vision) -> tuple[torch.Tensor, DynamicCache]:
        if cache is None and use_cache:
            data = list(zip(past.keys, past.values)) if past is not None and past.n_tokens else None
            cache = DynamicCache(ddp_cache_data=data, config=self.model.config)
        out = self.model(input_ids=ids.to(self.device), position_ids=positions.to(self.device), cache=cache,
                         use_cache=use_cache, logits_to_keep=1, **vision)
        return out.logits, cache

    def _tail(self, cache: DynamicCache, n: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        keys = tuple(layer.keys[:, :, -n:].clone() for layer in cache.layers)
        values = tuple(layer.values[:, :, -n:].clone() for layer in cache.layers)
        return keys, values

    @contextmanager
    def _capture(self, which: str):
        captured: list[torch.Tensor] = []
        proj = self._attn.k_proj if which == "k" else self._attn.q_proj
        handle = proj.register_forward_hook(lambda _m, _i, out: captured.append(out.detach()))
        try:
            yield captured
        finally:
            handle.remove()

    def _ids(self, text: str) -> torch.Tensor:
        return torch.tensor([self.tokenizer.encode(text, add_special_tokens=False)])

    @staticmethod
    def _text_positions(start: int, n: int) -> torch.Tensor:
        return (torch.arange(n) + start).view(1, 1, n).expand(3, 1, n)

    def _word_ids(self, words: list[str]) -> set[int]:
        return {self.tokenizer.encode(w, add_special_tokens=False)[0] for w in words}


class _StopForward(Exception):
    """Raised from a hook to end a forward once the layer of interest has run its projection."""


def mean_queries(model, texts: Sequence[Sequence[int]], layer: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(n, kv_heads * head_dim): per text (token ids), the mean pre-RoPE query at decoder `layer`, heads averaged
    within each KV group (the space of the mean pre-RoPE keys that index the blocks). The forward runs the layers
    below `layer` and stops at its q_proj: no later layers, no LM head. Differentiable: training uses it too."""
    cfg = model.config.get_text_config()
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    proj = model.model.language_model.layers[layer].self_attn.q_proj
    captured: list[torch.Tensor] = []

    def stop(_m, _i, out):
        captured.append(out)
        raise _StopForward

    handle = proj.register_forward_hook(stop)
    out = []
    try:
        for ids in texts:
            captured.clear()
            n = len(ids)
            try:
                model(input_ids=torch.tensor([list(ids)], device=device),
                      position_ids=torch.arange(n, device=device).view(1, 1, n).expand(3, 1, n), use_cache=False)
            except _StopForward:
                pass
            q = captured[0][0].float().mean(0)  # (heads * head_dim,)
            out.append(q.view(kv, heads // kv, head_dim).mean(1).reshape(-1))
    finally:
        handle.remove()
    return torch.stack(out)


def _unit(v: torch.Tensor) -> np.ndarray:
    v = v.float().cpu().numpy().astype(np.float32)
    return v / max(float(np.linalg.norm(v)), 1e-12)
