"""Small random speech checkpoints, saved as ordinary checkpoint directories that transformers' pipelines load
offline; tests use them to run `--asr DIR` and `--tts DIR` end to end without a download (their output is noise):

- `streamvid make-tiny --arch whisper --out DIR`: Whisper (speech recognition) with a byte-level BPE trained on the
  spot with Whisper's special tokens, and Whisper's own feature extractor;
- `streamvid make-tiny --arch vits --out DIR`: VITS (text to speech) with a character vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (GenerationConfig, VitsConfig, VitsModel, VitsTokenizer, WhisperConfig,
                          WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperProcessor,
                          WhisperTokenizerFast)

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
    processor = WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer)
    processor.save_pretrained(out)
    return out


def tiny_vits(out_dir: str | Path, seed: int = 0, hidden: int = 16) -> Path:
    """Write a random VITS (16 kHz, characters a-z and punctuation) to `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chars = list("_ abcdefghijklmnopqrstuvwxyz'.,?!")
    vocab = out / "vocab.json"
    vocab.write_text(json.dumps({c: i for i, c in enumerate(chars)}))
    tokenizer = VitsTokenizer(str(vocab), pad_token="_", unk_token="_", add_blank=True, normalize=True,
                              phonemize=False, language=None)
    config = VitsConfig(vocab_size=len(chars), hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                        ffn_dim=2 * hidden, flow_size=hidden, spectrogram_bins=33, upsample_initial_channel=hidden,
                        upsample_rates=[4, 4], upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3],
                        resblock_dilation_sizes=[[1, 3]], prior_encoder_num_flows=1, prior_encoder_num_wavenet_layers=1,
                        posterior_encoder_num_wavenet_layers=1, duration_predictor_num_flows=1,
                        duration_predictor_filter_channels=hidden, depth_separable_num_layers=1, sampling_rate=16000)
    torch.manual_seed(seed)
    VitsModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
