"""A small random Whisper checkpoint (`streamvid make-tiny --arch whisper --out DIR`): the model with random
weights, a byte-level BPE trained on the spot with Whisper's special tokens, and Whisper's own feature extractor,
saved as an ordinary checkpoint directory that `pipeline("automatic-speech-recognition")` loads offline. Tests use
it to run `--asr DIR` end to end without a download; its transcripts are noise."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                          WhisperProcessor, WhisperTokenizerFast)

from streamvid.checkpoints.tiny import CORPUS

SPECIAL = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
           "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]


def tiny_whisper(out_dir: str | Path, seed: int = 0, hidden: int = 32, layers: int = 1) -> Path:
    """Write a random English-only Whisper (80 mel bins, `layers` encoder and decoder layers) to `out_dir`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    eos = "<|endoftext|>"
    tokenizer = WhisperTokenizerFast(tokenizer_object=tok, unk_token=eos, bos_token=eos, eos_token=eos,
                                     pad_token=eos, additional_special_tokens=SPECIAL[1:])
    ids = {t: tok.token_to_id(t) for t in SPECIAL}
    config = WhisperConfig(vocab_size=tok.get_vocab_size(), num_mel_bins=80, d_model=hidden, encoder_layers=layers,
                           decoder_layers=layers, encoder_attention_heads=2, decoder_attention_heads=2,
                           encoder_ffn_dim=2 * hidden, decoder_ffn_dim=2 * hidden, max_source_positions=1500,
                           max_target_positions=64, decoder_start_token_id=ids["<|startoftranscript|>"],
                           eos_token_id=ids[eos], pad_token_id=ids[eos], bos_token_id=ids[eos],
                           begin_suppress_tokens=None, suppress_tokens=None)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids[eos], pad_token_id=ids[eos],
        max_length=16, no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=False)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer).save_pretrained(out)
    return out
