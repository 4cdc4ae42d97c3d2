"""streamvid: an online streaming video-LLM assistant."""

__version__ = "0.1.0"
