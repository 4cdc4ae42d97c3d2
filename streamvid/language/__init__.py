"""What people type and say, as text: questions and conditions cleaned and bounded, whether a question is about now,
"tell me when" conditions, times and the wake word in what a recogniser heard, words normalised.

language/ knows nothing of models, tensors, streams or threads: plain functions over strings.
"""

__all__ = ["clean", "words"]


def __getattr__(name: str):  # lazily: importing streamvid.language imports none of its modules
    import importlib

    where = {"clean": "user_text", "words": "text"}
    if name in where:
        return getattr(importlib.import_module(f"streamvid.language.{where[name]}"), name)
    raise AttributeError(name)
