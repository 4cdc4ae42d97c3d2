"""Which shapes a checkpoint's vision tower tells apart: a linear readout on its frozen tokens, then a confusion table.

    python benchmarks/vision_confusion.py [--model DIR] [--steps 300] [--seed 0]

The readout is train-tiny's own (`Readout`: per merged vision token, which shape and which colour cover its
cell), fitted with the tower frozen on freshly drawn ShapesWorld grid scenes (`grid_scene`, 32 a step, each frame
twice as one 2-frame chunk), then scored on 960 more. It shows what the language model can at best read from the
vision tokens; the rows are the true shape of each occupied cell, the columns the readout's answer.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from streamvid.adapters.qwen2_5_vl import QwenVLAdapter
from streamvid.config import BUNDLED_MODEL
from streamvid.synth.world import SHAPES
from streamvid.training.train_tiny import Readout, cell_classes, scene_batch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(BUNDLED_MODEL))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    adapter = QwenVLAdapter(args.model)
    model, processor = adapter.model, adapter.video_processor
    px = int(processor.size["longest_edge"] ** 0.5)  # the frame side the processor keeps (112 for the bundled model)
    readout = Readout(model.config.vision_config.out_hidden_size)
    opt = torch.optim.AdamW(readout.parameters(), lr=3e-3)

    def scenes(n: int):
        video, cells, counts = scene_batch(processor, rng, n, px, 2)
        with torch.no_grad():
            tokens = model.model.get_video_features(video["pixel_values_videos"], video["video_grid_thw"],
                                                    return_dict=True).pooler_output
        return torch.cat(list(tokens)), cells, counts

    for _ in range(args.steps):
        tokens, cells, counts = scenes(32)
        loss = readout.loss(tokens, cells, counts)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    names = ["none", *SHAPES]
    table = np.zeros((len(names), len(names)), dtype=int)
    with torch.no_grad():
        for _ in range(30):
            tokens, cells, _ = scenes(32)
            truth, _ = cell_classes(np.concatenate(cells))
            np.add.at(table, (truth, readout.shape(tokens).argmax(-1).numpy()), 1)
    print(f"{'':10s}" + "".join(f"{n:>9s}" for n in names) + "  accuracy")
    for i, n in enumerate(names):
        print(f"{n:10s}" + "".join(f"{v:9d}" for v in table[i]) + f"  {table[i, i] / max(1, table[i].sum()):.3f}")
    print(json.dumps({"model": args.model, "steps": args.steps, "seed": args.seed,
                      "accuracy": {n: round(float(table[i, i] / max(1, table[i].sum())), 3)
                                   for i, n in enumerate(names)}}))


if __name__ == "__main__":
    main()
