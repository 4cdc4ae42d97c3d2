"""One stream fed from a source: StreamingAssistant, its hearing, and its snapshots (schema, store, window file,
durable writes, the session lock and autosaver, the state at a cut).

assistant/ knows nothing of HTTP, the hub's clients or the command line.
"""

__all__ = ["StreamingAssistant"]


def __getattr__(name: str):  # lazily: importing streamvid.assistant imports none of its modules
    import importlib

    where = {"StreamingAssistant": "assistant"}
    if name in where:
        return getattr(importlib.import_module(f"streamvid.assistant.{where[name]}"), name)
    raise AttributeError(name)
