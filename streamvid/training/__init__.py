"""Building and training the bundled model (`streamvid train-tiny`); not an adapter."""
