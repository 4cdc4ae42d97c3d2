"""Resumable training state, in the output folder: `resume/state.safetensors` (the model's float32 weights, the
readout's, the optimizer's moments, torch's RNG state) and `resume/state.json` (stage, next step, the config, the
NumPy generator's state, the optimizer's settings, the history so far, main-training seconds spent). No pickle.

A new state is written beside the last one and swapped in by renames, so a run killed while writing leaves the last
complete state (`resume.old` during the swap)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from .config import TrainConfig, config_from_json, config_json

STATE_DIR = "resume"
FORMAT = 1


def _tensors(prefix: str, state: dict) -> dict[str, torch.Tensor]:
    return {f"{prefix}{k}": v.detach().clone().contiguous() for k, v in state.items()}


def save_state(out: Path, *, stage: str, step: int, cfg: TrainConfig, model, readout, opt: torch.optim.Optimizer,
               rng: np.random.Generator, history: list[dict], elapsed_s: float, previous: dict | None) -> Path:
    """Write the state to continue from: `stage` ("warmup", "main" or "done") at step `step` (steps done)."""
    out = Path(out)
    tensors = {**_tensors("model.", model.state_dict()), **_tensors("readout.", readout.state_dict()),
               "rng.torch": torch.get_rng_state().clone()}
    opt_state = opt.state_dict()
    extra: dict[str, dict] = {}
    for i, s in opt_state["state"].items():
        for k, v in s.items():
            if torch.is_tensor(v):
                tensors[f"opt.{i}.{k}"] = v.detach().clone().contiguous()
            else:
                extra.setdefault(str(i), {})[k] = v
    groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()} for g in opt_state["param_groups"]]
    meta = {"format": FORMAT, "stage": stage, "step": step, "config": config_json(cfg),
            "numpy_rng": rng.bit_generator.state, "optimizer": {"param_groups": groups, "state_extra": extra},
            "history": history, "elapsed_s": elapsed_s, "fine_tuned_from": previous,
            "written": time.strftime("%Y-%m-%dT%H:%M:%S")}
    tmp, final, old = out / f"{STATE_DIR}.tmp", out / STATE_DIR, out / f"{STATE_DIR}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, tmp / "state.safetensors")
    (tmp / "state.json").write_text(json.dumps(meta))
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def state_dir(out: Path) -> Path | None:
    """The folder of the last complete state in `out` (None if there is none)."""
    for name in (STATE_DIR, f"{STATE_DIR}.old"):
        d = Path(out) / name
        if (d / "state.json").is_file() and (d / "state.safetensors").is_file():
            return d
    return None


def load_state(out: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(the JSON record, the tensors) of the last state in `out`."""
    d = state_dir(out)
    if d is None:
        raise ValueError(f"no training state to resume in {out} (expected {Path(out) / STATE_DIR}/state.json)")
    meta = json.loads((d / "state.json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"training state in {d} has format {meta.get('format')}, this train-tiny reads {FORMAT}")
    return meta, load_file(d / "state.safetensors")


def state_config(meta: dict, out: Path) -> TrainConfig:
    return config_from_json(meta["config"], out)


def _part(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def restore_modules(tensors: dict[str, torch.Tensor], model, readout) -> None:
    model.load_state_dict(_part(tensors, "model."), strict=True)
    readout.load_state_dict(_part(tensors, "readout."), strict=True)


def restore_optimizer(meta: dict, tensors: dict[str, torch.Tensor], opt: torch.optim.Optimizer) -> None:
    saved = meta["optimizer"]
    state: dict[int, dict] = {}
    for k, v in _part(tensors, "opt.").items():
        i, name = k.split(".", 1)
        state.setdefault(int(i), {})[name] = v
    for i, extra in saved["state_extra"].items():
        state.setdefault(int(i), {}).update(extra)
    groups = [{k: tuple(v) if k == "betas" else v for k, v in g.items()} for g in saved["param_groups"]]
    opt.load_state_dict({"state": state, "param_groups": groups})


def restore_rng(meta: dict, tensors: dict[str, torch.Tensor], rng: np.random.Generator) -> None:
    rng.bit_generator.state = meta["numpy_rng"]
    torch.set_rng_state(tensors["rng.torch"])
