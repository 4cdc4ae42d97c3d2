"""train-tiny's settings (`TrainConfig`), the question families it trains, and the config's JSON form (the training
record and the resumable checkpoints store it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from streamvid.config import DEFAULTS

REALTIME = ("realtime_colour", "realtime_shape", "realtime_count", "realtime_exists", "probe", "probe_edge")
FAMILY_WEIGHTS = {"realtime_colour": 1.0, "realtime_shape": 1.0, "realtime_count": 1.0, "realtime_exists": 1.0,
                  "probe": 1.0, "probe_edge": 1.0, "backward_colour": 2.0, "backward_shape": 1.5,
                  "backward_at_time": 1.5, "realtime_said": 1.5, "backward_said_at_time": 1.5, "when_said": 1.5}
# questions about what was said, answered from the speech blocks (training/speech.py)
SPEECH = ("realtime_said", "backward_said_at_time", "when_said")
# what a user asks and the engine keeps in the stream's dialogue (`Reasoning.complete`): trigger probes and "tell
# me when" requests never enter it
DIALOGUE_FAMILIES = ("realtime_colour", "realtime_shape", "realtime_count", "realtime_exists", "backward_colour",
                     "backward_shape", "backward_at_time", *SPEECH)
# answered without the dialogue: a question that names a time (the moment alone, `Reasoning.begin`) and the trigger
# probes (`adapter.probe`: the bare question)
ALONE = ("backward_at_time", "backward_said_at_time", "probe", "probe_edge")
# the user questions train-tiny asks aloud (`heard_p`): not those that name a time, which the engine answers from the
# blocks at the time it reads in the words (a misheard "at 254" names none, and the engine answers it otherwise)
ASKED_ALOUD = tuple(f for f in DIALOGUE_FAMILIES if f not in ALONE)
CONFUSABLE = ("circle", "hexagon")  # the shapes the bundled tower confused most (benchmarks/vision_confusion.py)
PROBE_TEMPLATE = "Is there {a} {c} {s} now? Answer yes or no."
N_EVAL_TIMELINES = 2


@dataclass(frozen=True)
class TrainConfig:
    out_dir: Path
    seed: int = 0
    steps: int | None = None  # None: 6,000 (or the time budget first); 0: the tower alone
    batch: int = 8
    lr: float = 1e-3
    weight_decay: float = 0.1
    window_blocks: int = 8  # the engine's default window (window_tokens / tokens per block)
    top_k: int = DEFAULTS.memory.top_k  # the engine's default
    fps: float = DEFAULTS.fps
    frames_per_chunk: int = DEFAULTS.frames_per_chunk
    frame_px: int = 112
    minutes: float = 10.0
    n_timelines: int = 32
    hidden: int = 128
    layers: int = 4
    contrastive_weight: float = 1.0
    short_window_frac: float = 0.3  # the first steps see 1-3 window blocks: fewer distractors while binding is learnt
    # earlier dialogue turns: questions asked at earlier moments of the stream with the answers right then, as the
    # engine keeps them (`dialogue_turns`, 2 by default); shares of samples with 0, 1 and 2 earlier turns
    turn_mix: tuple = (0.25, 0.25, 0.5)
    turn_gap_s: float = 20.0  # mean time between two turns (exponential; at least one frame)
    same_family_p: float = 0.5  # an earlier turn asks the current question's family (the same words, an older answer)
    time_budget_s: float = 105 * 60  # main training, summed over resumed runs; the cosine follows it
    vision_warmup_steps: int = 800
    warmup_scenes: int = 32  # scenes or chunks per vision warm-up step
    word_attention_layer: int = 1  # decoder layer whose heads 0 and 1 learn to look from a named word to the object
    answer_attention_layer: int = 2  # ... and from the answer to the named words
    attention_weight: float = 0.5
    # the block side of retrieval: the tower's merger (the layer that makes each merged vision token from its 2x2
    # patches) trains in the main stage with the language model, on the tower's frozen blocks' outputs computed
    # once; None: on for a fresh retrain, off for a fine-tune (`init_from`)
    block_side: bool | None = None
    block_lr_scale: float = 0.5  # the merger's learning rate, relative to `lr` (no weight decay)
    bank_weight: float = 1.0  # retrieval as memory searches: names against one stream's past blocks
    bank_blocks: int = 96  # past blocks scored per bank (every block showing a chosen name among them)
    bank_names: int = 4  # names (colour or shape) asked per bank, one bank per step
    readout_weight: float = 0.1  # the warm-up's dense cell targets on the trained merger's tokens
    checkpoint_every_s: float = 600.0  # resumable state written at least this often (and at each stage's start)
    checkpoint_every_steps: int | None = None  # ... and every this many main steps
    log_every: int = 50
    eval_every: int = 500
    eval_samples: int = 160
    families: dict = field(default_factory=lambda: dict(FAMILY_WEIGHTS))
    init_from: Path | None = None  # fine-tune this checkpoint instead of a fresh one
    vision_refine_steps: int = 0  # fine-tuning: steps that refine its tower first (0: the tower stays as it is)
    vision_refine_lr: float = 1e-3
    vision_anchor: float = 1.0  # weight of the refined tokens' relative squared distance to the tower's tokens before
    confusable_frac: float = 0.5  # share of refinement scenes that show a CONFUSABLE shape
    # share of user questions asked aloud: in the words the default recogniser heard synth's voices say them in
    # (training/heard.py; the table is built once into the training folder)
    heard_p: float = 0.0

    @property
    def trains_block_side(self) -> bool:
        return (self.init_from is None) if self.block_side is None else self.block_side


def config_json(cfg: TrainConfig) -> dict:
    """The config as JSON values (paths as strings), `out_dir` left out: the folder it is read from."""
    return {k: str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v
            for k, v in asdict(cfg).items() if k != "out_dir"}


def config_from_json(d: dict, out_dir: Path) -> TrainConfig:
    names = {f.name for f in fields(TrainConfig)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"checkpoint config has settings this train-tiny does not know: {sorted(unknown)}")
    kw = dict(d)
    if kw.get("init_from") is not None:
        kw["init_from"] = Path(kw["init_from"])
    if "turn_mix" in kw:
        kw["turn_mix"] = tuple(kw["turn_mix"])
    return TrainConfig(out_dir=Path(out_dir), **kw)
