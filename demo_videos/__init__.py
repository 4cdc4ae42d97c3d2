"""The demo clips (README.md here), installed with streamvid as the package data `streamvid.assets.demo_videos`
(streamvid/assets/__init__.py finds them)."""
