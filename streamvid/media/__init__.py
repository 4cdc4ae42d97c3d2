"""Frames in and evidence out: sources (files, cameras, URLs, pushed frames, synthetic), decoding, which addresses a
URL may reach, and the frames and clips kept behind each alert.

media/ knows nothing of models, KV or the engine: it turns containers and cameras into Frames and back.
"""

__all__ = ["FrameSource", "open_source"]


def __getattr__(name: str):  # lazily: importing streamvid.media imports none of its modules
    import importlib

    where = {"FrameSource": "frame_source", "open_source": "source_spec"}
    if name in where:
        return getattr(importlib.import_module(f"streamvid.media.{where[name]}"), name)
    raise AttributeError(name)
