"""The models the engine runs, one adapter per family behind one protocol, with where retrieval vectors come from
(embedders) and what a model folder says (model_folder, retrieval).

adapters/ knows nothing of streams, windows or the scheduler: it runs forwards on what it is given.
"""
