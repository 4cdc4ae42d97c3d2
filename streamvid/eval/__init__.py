"""Scoring the assistant on stream episodes: benchmark converters (convert/), replay, answer metrics, timeliness of
alerts, retrieval recall, word error rate, reports.

eval/ knows nothing of HTTP or the hub: it drives StreamingAssistant directly, one episode at a time (as Ray tasks
with --ray).
"""
