"""The engine's command-line settings, shared by every command that runs the engine (run, score, demo, serve):
the flags (one default per setting: EngineConfig's), the config they make, and the checks made before a model
loads."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def offline_if_local(*models: str | None) -> None:
    """Offline (HF_HUB_OFFLINE=1) when every model is a local directory, like the bundled one; a hub id keeps
    the hub reachable for a user with network. Called before transformers is imported."""
    if all(m is None or Path(m).is_dir() for m in models):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """Every engine setting that has a flag (config.opt with help), generated from EngineConfig: `--memory-top-k`
    sets `memory_top_k`, its default is the config's. Shared by run, score, demo and serve; each section is one
    group of the help."""
    from streamvid.config import DEFAULTS, setting_fields

    groups = {}
    parser.add_argument("--model", default=DEFAULTS.model, help="HF checkpoint directory or id (default: bundled)")
    defaults = DEFAULTS.settings()
    for section, f in setting_fields():
        help = f.metadata["help"]
        if help is None:
            continue
        if section not in groups:
            groups[section] = parser.add_argument_group(f"engine: {section}" if section else "engine")
        name = f.metadata["setting"]
        default = defaults[name]
        kinds = {k.strip() for k in str(f.type).split("|")}
        kw = dict(f.metadata["flag"])
        if "bool" in kinds:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = int if "int" in kinds else float if "float" in kinds else str
            if "choices" not in kw:
                kw.setdefault("metavar", {int: "N", float: "X"}.get(kw["type"], "TEXT"))
            if default is not None:
                help += " (default %(default)s)"
        groups[section].add_argument("--" + name.replace("_", "-"), dest=name, default=default, help=help, **kw)


def engine_config(args: argparse.Namespace, **settings):
    """The EngineConfig of the engine flags in `args` (and `settings` over them). A streamvid-trained model's
    frame size is the default of --frame-px (model_folder.model_settings), logged when applied."""
    from streamvid.adapters.model_folder import TRAINED_MARKER, model_settings
    from streamvid.config import SETTINGS, EngineConfig

    given = {name: getattr(args, name) for name in SETTINGS if hasattr(args, name)}
    config = EngineConfig.from_settings(**{**given, **settings})
    unset = {k: v for k, v in model_settings(config.model).items() if config.settings()[k] is None}
    for name, value in unset.items():
        log.info("%s holds %s (trained by streamvid): %s %s (--%s overrides)", config.model, TRAINED_MARKER, name,
                 value, name.replace("_", "-"))
    return config.replace(**unset)


def embedder_checkpoint(args: argparse.Namespace) -> str | None:
    """The checkpoint `--embedder clip:ID` loads (None for the model's own vectors); a malformed value is the
    one-line ValueError of embedders.check_spec."""
    from streamvid.adapters.embedders import embedder_model

    return embedder_model(args.embedder)


def check_model(model: str) -> None:
    """A missing or broken checkpoint directory is one line that says what is wrong, before anything loads."""
    from streamvid.config import BUNDLED_MODEL

    if model == str(BUNDLED_MODEL) and not (BUNDLED_MODEL / "config.json").exists():
        raise ValueError(f"bundled model missing at {BUNDLED_MODEL}: run `streamvid train-tiny` or pass --model")
    folder = Path(model)
    if not (folder.exists() or model.startswith((".", "/", "~")) or model.count("/") > 1):
        return  # a Hugging Face id ("Qwen/Qwen2.5-VL-3B-Instruct"): the loader checks it
    if not folder.is_dir():
        raise ValueError(f"model directory not found: {model} (pass --model with a checkpoint directory or a "
                         f"Hugging Face id)")
    config = folder / "config.json"
    if not config.is_file():
        raise ValueError(f"{model} is not a model checkpoint: it has no config.json")
    try:
        json.loads(config.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{config} is not valid JSON ({e}): the checkpoint is damaged; copy it again") from None
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise ValueError(f"{model} has no weight files (*.safetensors or *.bin): the checkpoint is incomplete")
