"""Checkpoints streamvid builds itself, from configs and random weights (no download):

    tiny.py         a small Qwen2.5-VL with its own tokenizer and processor: the tests' model and the start of
                    `streamvid train-tiny`
    families.py     a small random checkpoint of every supported family (`streamvid make-tiny --arch A`)
    hybrid.py       the small random Qwen3.5 (Gated DeltaNet + full-attention layers) of `make-tiny --arch qwen3.5`
    tiny_parts.py   what the builders share: a BPE on the bundled corpus, small widths, Qwen3-VL's processor
    random_arch.py  real-size Qwen2.5-VL architectures with random weights (`streamvid bench --arch 3b|7b`)
    real_size.py    real-size SmolVLM2 / InternVL3.5 / Qwen3.5 architectures with random weights and their own
                    processors (`streamvid bench --arch smolvlm2-256m|smolvlm2-500m|internvl3.5-1b|qwen3.5-0.8b|...`)

Each writes an ordinary HF checkpoint directory that the adapters (streamvid/adapters/) load like a hub model.

checkpoints/ knows nothing of streams or the engine: it writes ordinary HF checkpoint folders.
"""
