"""Which decoder layer makes the retrieval vectors of a checkpoint.

A block is indexed by the pre-RoPE keys of its video tokens at one decoder layer (their mean, and per region of the
frame: embedders.py), a question by the mean pre-RoPE query of its tokens at the same layer (heads averaged within
each KV group), computed by a forward that stops at that layer's q_proj (adapters/hf.py `mean_queries`: no later
layers, no LM head).

- Checkpoints trained by `streamvid train-tiny` (the bundled model; their folder holds `training.json`) learn
  layer 0 for this, with a contrastive loss between questions and the blocks that answer them: layer 0.
- Any other checkpoint: the middle decoder layer (a hybrid model's attention layer nearest the middle: its
  linear-attention layers have no keys or queries). At layer 0 a key or query is a linear map of one token's
  input embedding, and a video token's embedding comes from the vision tower's projector while a question's comes
  from the word embeddings: nothing has mixed them yet, so the two need not share directions. After a few layers
  each token has attended to its context and carries more of what it means; the last layers specialise in
  predicting the next token. The middle is the usual compromise (as in attention-based KV retrieval for video
  LLMs, which reads the model's own attention inside the decoder rather than at its input).

Not verified here: this machine has no stock weights, so how well any layer retrieves for a real Qwen2.5-VL or
LLaVA checkpoint is unmeasured; `--index-layer N` (the index_layer setting) overrides the default, and
`streamvid score` on ShapesWorld episodes reports `retrieval_recall`, the measure to choose it by.
"""

from __future__ import annotations

import logging

from streamvid.adapters.model_folder import TRAINED_MARKER, trained_by_streamvid

log = logging.getLogger(__name__)

MEMORY_ENCODINGS = ("window", "sinks")  # what long-term memory keeps of a block (the memory_encoding setting)


def default_memory_encoding(model: str) -> str:
    """How blocks bound for long-term memory are encoded (the memory_encoding setting): "sinks" for a
    checkpoint trained by streamvid, which learned to read retrieved blocks encoded after the sinks alone
    (train-tiny lays them out so), else "window" (the block's KV as the window computed it, training-free)."""
    if trained_by_streamvid(model):
        log.info("%s holds %s (trained by streamvid): memory blocks are encoded after the sinks alone "
                 "(--memory-encoding window overrides)", model, TRAINED_MARKER)
        return "sinks"
    return "window"


def default_index_layer(config: dict, model: str) -> int:
    """Layer 0 for a checkpoint trained by streamvid (its folder has training.json), else the middle layer."""
    if trained_by_streamvid(model):
        log.info("%s holds %s (trained by streamvid): retrieval vectors from decoder layer 0 (--index-layer N "
                 "overrides)", model, TRAINED_MARKER)
        return 0
    text = config.get("text_config") or config
    layers = text.get("num_hidden_layers") or config.get("num_hidden_layers")
    if not layers:
        raise ValueError(f"config of {model!r} has no num_hidden_layers: pass index_layer")
    middle = int(layers) // 2
    kinds = text.get("layer_types") or ()
    attention = [i for i, kind in enumerate(kinds) if kind != "linear_attention"]
    if kinds and attention:  # a hybrid model: its attention layer nearest the middle (linear layers have no keys)
        return min(attention, key=lambda i: (abs(i - middle), i))
    return middle
