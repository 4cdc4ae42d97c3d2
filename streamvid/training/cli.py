"""`python -m streamvid.training`: `streamvid train-tiny` with its resumable options.

    python -m streamvid.training --out DIR [--seed S] [--steps N] [--time-budget-min M] [--init DIR]
                                 [--vision-refine-steps N] [--lr LR] [--block-side | --no-block-side]
                                 [--heard-questions P]
    python -m streamvid.training --resume DIR [--time-budget-min M]

`--resume DIR` continues the training whose state is in DIR (`DIR/resume/`, written at least every 10 minutes) with
the settings it was started with; `--time-budget-min` then sets the main-training budget, summed over the runs.
`add_arguments` and `run` are what `streamvid train-tiny` needs to offer the same options."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

RESUME_ONLY = ("time_budget_min",)  # the settings a resumed run may change


def add_arguments(p: argparse.ArgumentParser, default_out: Path | None = None) -> None:
    p.add_argument("--out", type=Path, default=default_out)
    p.set_defaults(default_out=default_out)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--time-budget-min", type=float, default=None,
                   help="stop after this many minutes of main training, summed over resumed runs (default 105); "
                        "the learning rate decays to it")
    p.add_argument("--init", type=Path, default=None,
                   help="fine-tune this checkpoint (no vision warm-up; learning rate 3e-4 unless --lr)")
    p.add_argument("--vision-refine-steps", type=int, default=0,
                   help="with --init: first refine its vision tower for this many steps, anchored to its tokens")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3, fine-tuning 3e-4)")
    p.add_argument("--block-side", action=argparse.BooleanOptionalAction, default=None,
                   help="train the tower's merger with the language model and the retrieval bank (default: on for "
                        "a fresh retrain, off for a fine-tune)")
    p.add_argument("--heard-questions", type=float, default=0.0, metavar="P",
                   help="ask this share of the user questions in the words the default recogniser heard synth's "
                        "voices say them in (needs espeak-ng; the table is built once into --out)")
    p.add_argument("--resume", type=Path, default=None, metavar="DIR",
                   help="continue the training whose state is in DIR from its last checkpoint")


def run(args: argparse.Namespace) -> dict:
    from streamvid.training.train_tiny import TrainConfig, resume, train

    budget = None if args.time_budget_min is None else 60 * args.time_budget_min
    if args.resume is not None:
        defaults = {"seed": 0, "steps": None, "init": None, "vision_refine_steps": 0, "lr": None, "block_side": None,
                    "heard_questions": 0.0}
        changed = [k for k, v in defaults.items() if getattr(args, k) != v]
        out_given = args.out is not None and args.out != getattr(args, "default_out", None)
        if changed or (out_given and Path(args.out).resolve() != Path(args.resume).resolve()):
            names = ", ".join("--" + k.replace("_", "-") for k in changed or ["out"])
            raise ValueError(f"--resume continues with the settings the run started with: drop {names}")
        return resume(args.resume, budget)
    if args.out is None:
        raise ValueError("give the output folder with --out DIR (or --resume DIR)")
    if args.vision_refine_steps and args.init is None:
        raise ValueError("--vision-refine-steps refines a checkpoint's tower: give the checkpoint with --init DIR")
    kw = {} if budget is None else {"time_budget_s": budget}
    if args.init is not None:
        kw.update(init_from=args.init, lr=3e-4, short_window_frac=0.0, vision_refine_steps=args.vision_refine_steps)
    if args.lr is not None:
        kw["lr"] = args.lr
    if args.block_side is not None:
        kw["block_side"] = args.block_side
    if args.heard_questions:
        kw["heard_p"] = args.heard_questions
    return train(TrainConfig(out_dir=args.out, seed=args.seed, steps=args.steps, **kw))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streamvid.training", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        run(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
