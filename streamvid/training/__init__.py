"""Building and training the bundled model (`streamvid train-tiny`); not an adapter.

training/ knows nothing of serving, sessions or the hub: it builds checkpoints the adapters load.
"""
