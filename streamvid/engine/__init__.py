"""The engine and its streams: one model, any number of streams, one scheduler that batches answers, ingest and
speaking up across them, with per-stream ingest, reasoning, triggers and limits.

engine/ knows nothing of HTTP, sessions or files: callers hand it frames and questions and read outputs.
"""

__all__ = ["Engine", "EngineFull", "Stream"]


def __getattr__(name: str):  # lazily: importing streamvid.engine imports none of its modules
    import importlib

    where = {"Engine": "engine", "EngineFull": "admission", "Stream": "stream"}
    if name in where:
        return getattr(importlib.import_module(f"streamvid.engine.{where[name]}"), name)
    raise AttributeError(name)
