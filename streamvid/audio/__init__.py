"""Hearing a stream: its sound as 16 kHz mono samples (pcm), cut into utterances by a voice activity detector
(vad), transcribed by a pluggable speech recogniser (asr) on a listener thread per stream (listener), so that
recognition never runs inside the engine's scheduler step. The stream puts each utterance into its KV window as a
speech block (ingest.py) and emits it as a {"type": "transcript"} output.

audio/ knows nothing of the engine, KV or scheduling: it turns sound into utterances and text into speech.
"""
