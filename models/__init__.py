"""Model folders. `streamvid-tiny/` is the bundled model, installed with streamvid as the package data
`streamvid.assets.models` (streamvid/assets/__init__.py finds it); `streamvid make-tiny` and `streamvid train-tiny`
write further checkpoints here in the docs' examples."""
