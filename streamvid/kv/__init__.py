"""The KV a stream keeps: its window of recent blocks and the device buffer behind it, positions and re-rotation,
compaction, budgets in seconds/tokens/bytes, long-term memory with its FAISS index, and the search over what was
said.

kv/ knows nothing of the engine's scheduling, of sources or of sessions: it stores and finds blocks.
"""

__all__ = ["Block", "KVWindow", "LongTermMemory"]


def __getattr__(name: str):  # lazily: importing streamvid.kv imports none of its modules
    import importlib

    where = {"Block": "window", "KVWindow": "window", "LongTermMemory": "memory"}
    if name in where:
        return getattr(importlib.import_module(f"streamvid.kv.{where[name]}"), name)
    raise AttributeError(name)
