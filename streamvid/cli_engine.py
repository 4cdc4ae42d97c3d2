"""The engine's command-line settings, shared by every command that runs the engine (run, score, demo, serve):
the flags (one default per setting: EngineConfig's), the config they make, and the checks made before a model
loads."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from streamvid.budget import MEMORY_KINDS
from streamvid.retrieval import MEMORY_ENCODINGS


def offline_if_local(*models: str | None) -> None:
    """Offline (HF_HUB_OFFLINE=1) when every model is a local directory, like the bundled one; a hub id keeps
    the hub reachable for a user with network. Called before transformers is imported."""
    if all(m is None or Path(m).is_dir() for m in models):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def add_engine_args(parser: argparse.ArgumentParser, d) -> None:
    """Model placement and budgets, shared by run, demo and score."""
    parser.add_argument("--device", default=d.device, help="auto (CUDA when there is a GPU), cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default=d.dtype, choices=("auto", "bfloat16", "float16", "float32"),
                        help="auto: bfloat16 on CUDA, float32 on the CPU")
    parser.add_argument("--device-map", default=d.device_map, metavar="MAP",
                        help="'auto': spread a checkpoint that does not fit one device (needs accelerate)")
    parser.add_argument("--attn", default=d.attn, choices=("auto", "sdpa", "flash_attention_2", "eager"),
                        help="attention kernel (auto: flash-attention 2 on CUDA when installed, else SDPA)")
    parser.add_argument("--window-s", type=float, default=d.window_s, help="KV window in seconds of video")
    parser.add_argument("--window-mb", type=float, default=None, help="KV window in MB of KV (instead of seconds)")
    parser.add_argument("--window-tokens", type=int, default=d.window_tokens,
                        help="KV window in tokens (instead of seconds)")
    parser.add_argument("--memory-top-k", type=int, default=d.memory_top_k,
                        help="blocks retrieved from long-term memory per question (0 turns retrieval off)")
    parser.add_argument("--dialogue-turns", type=int, default=d.dialogue_turns, metavar="N",
                        help="earlier question/answer pairs kept as context for the next question (0: none; "
                             "default %(default)s); score: an episode's protocol may set its own")
    parser.add_argument("--memory-ram-mb", type=float, default=d.memory_ram_mb, help="long-term memory in RAM")
    parser.add_argument("--memory-disk-mb", type=float, default=d.memory_disk_mb, help="long-term memory on disk")
    parser.add_argument("--memory-kv", default=d.memory_kv, choices=MEMORY_KINDS,
                        help="how long-term KV blocks are stored (int8: 1 byte per element, int4: 0.56)")
    parser.add_argument("--memory-encoding", default=None, choices=MEMORY_ENCODINGS,
                        help="what memory keeps of a block: its KV from the window, or the chunk encoded again after "
                             "the sinks alone (default: sinks for a streamvid-trained model, else window)")
    parser.add_argument("--memory-keep", type=float, default=d.memory_keep,
                        help="share of each long-term block's tokens kept (1: all)")
    parser.add_argument("--retrieve-for-now", action="store_true",
                        help="search long-term memory for questions about the present moment too (by default they "
                             "are answered from the recent window; see streamvid/scope.py)")
    parser.add_argument("--index-layer", type=int, default=None,
                        help="decoder layer of the retrieval vectors (default: retrieval.default_index_layer)")
    parser.add_argument("--max-streams", type=int, default=d.max_streams, metavar="N",
                        help="streams one engine serves at once (more are refused)")
    parser.add_argument("--max-batch", type=int, default=d.max_batch, metavar="N",
                        help="streams whose chunks, probes and decode steps share one batched forward (1: one "
                             "forward per stream)")
    parser.add_argument("--idle-release-s", type=float, default=d.idle_release_s, metavar="S",
                        help="a stream without frames this long moves its window KV off the device until its next "
                             "frame (default: never)")
    parser.add_argument("--engine-kv-mb", type=float, default=d.engine_kv_mb, metavar="MB",
                        help="device KV of all streams' windows together; a stream that would pass it is refused")
    parser.add_argument("--engine-memory-mb", type=float, default=d.engine_memory_mb, metavar="MB",
                        help="host RAM of all streams' long-term memories together (their --memory-ram-mb); a stream "
                             "that would pass it is refused")
    parser.add_argument("--embedder", default=d.embedder, metavar="model|clip:ID",
                        help="retrieval vectors: the model's own (model), or a CLIP/SigLIP checkpoint's image and "
                             "text features (clip:HF_ID or clip:DIR)")


def embedder_checkpoint(args: argparse.Namespace) -> str | None:
    """The checkpoint `--embedder clip:ID` loads (None for the model's own vectors); a malformed value is the
    one-line ValueError of embedders.check_spec."""
    from streamvid.embedders import embedder_model

    return embedder_model(args.embedder)


def engine_config(args: argparse.Namespace, **fields):
    from streamvid.config import EngineConfig

    return EngineConfig(model=args.model, device=args.device, dtype=args.dtype, device_map=args.device_map,
                        attn=args.attn, window_s=args.window_s, window_mb=args.window_mb,
                        window_tokens=args.window_tokens, memory_top_k=args.memory_top_k,
                        dialogue_turns=args.dialogue_turns,
                        memory_ram_mb=args.memory_ram_mb,
                        memory_disk_mb=args.memory_disk_mb, memory_kv=args.memory_kv, memory_keep=args.memory_keep,
                        memory_encoding=args.memory_encoding, index_layer=args.index_layer, embedder=args.embedder,
                        retrieve_for_now=args.retrieve_for_now, fps=args.fps, max_streams=args.max_streams,
                        max_batch=args.max_batch, idle_release_s=args.idle_release_s,
                        engine_kv_mb=args.engine_kv_mb, engine_memory_mb=args.engine_memory_mb, **fields)


def check_model(model: str) -> None:
    """A missing or broken checkpoint directory is one line that says what is wrong, before anything loads."""
    from streamvid.config import BUNDLED_MODEL

    if model == str(BUNDLED_MODEL) and not (BUNDLED_MODEL / "config.json").exists():
        raise ValueError(f"bundled model missing at {BUNDLED_MODEL}: run `streamvid train-tiny` or pass --model")
    folder = Path(model)
    if not (folder.exists() or model.startswith((".", "/", "~")) or model.count("/") > 1):
        return  # a Hugging Face id ("Qwen/Qwen2.5-VL-3B-Instruct"): the loader checks it
    if not folder.is_dir():
        raise ValueError(f"model directory not found: {model} (pass --model with a checkpoint directory or a "
                         f"Hugging Face id)")
    config = folder / "config.json"
    if not config.is_file():
        raise ValueError(f"{model} is not a model checkpoint: it has no config.json")
    try:
        json.loads(config.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{config} is not valid JSON ({e}): the checkpoint is damaged; copy it again") from None
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise ValueError(f"{model} has no weight files (*.safetensors or *.bin): the checkpoint is incomplete")
