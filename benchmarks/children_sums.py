"""Time of the EM M-step's weighted sum over the children, by slice count.

EM routing sums `weights * votes` over the children of every parent many
times per step (`keras_capsules/ops/em/_reductions.py`). With XLA on CPU the
sum is written as slice additions followed by one `reduce`, and how many
slices it takes decides whether XLA vectorises it: this script times that
one sum, jit-compiled, for vote tensors in the layout EMConvCaps' votes
take with XLA (`keras_capsules/ops/em/_vote_layouts.py`), `(children, batch,
positions, 4, num_out, 4)`, with the weights broadcast over the pose, for
each slice count of `--slices` (`auto` is the count the library picks,
`_reductions.chunk_count`). It prints the median of `--steps` calls
after one warm-up call, and writes JSON with the
environment if asked.

Usage:
    KERAS_BACKEND=tensorflow python -m benchmarks.children_sums \\
        --shapes 144:16:16,256:16:16,72:36:16,288:36:32 --slices 8,auto
"""

import argparse

import keras
import numpy as np

from benchmarks import common
from keras_capsules.ops.em import _reductions


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--shapes",
        default="144:16:16,256:16:16,72:36:16,288:36:32",
        help="Comma-separated children:positions:num_out triples.",
    )
    parser.add_argument(
        "--slices",
        default="8,auto",
        help="Comma-separated slice counts; `auto` is the library's.",
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def time_sum(children, positions, num_out, slices, batch, steps):
    """Median seconds of one jit-compiled weighted sum over the children."""
    rng = np.random.default_rng(0)
    votes = rng.random((children, batch, positions, 4, num_out, 4))
    weights = rng.random((children, batch, positions, 1, num_out, 1))
    votes = keras.ops.convert_to_tensor(votes.astype("float32"))
    weights = keras.ops.convert_to_tensor(weights.astype("float32"))
    fn = common.xla_compiled(
        lambda w, v: _reductions.sliced_sum(w * v, 0, slices)
    )
    if fn is None:
        raise SystemExit("XLA backends only: KERAS_BACKEND=tensorflow or jax.")
    return common.median_call_seconds(fn, steps, weights, votes)


def main(argv=None):
    args = parse_args(argv)
    rows = []
    for triple in args.shapes.split(","):
        children, positions, num_out = map(int, triple.split(":"))
        for text in args.slices.split(","):
            auto = text == "auto"
            if auto:
                slices = _reductions.chunk_count(children)
            else:
                slices = int(text)
            if children % slices:
                print(f"skip: {slices} slices do not divide {children}")
                continue
            seconds = time_sum(
                children, positions, num_out, slices, args.batch, args.steps
            )
            row = {
                "children": children,
                "positions": positions,
                "num_out": num_out,
                "slices": slices,
                "per_slice": children // slices,
                "auto": auto,
                "ms": round(seconds * 1e3, 2),
            }
            rows.append(row)
            print(
                f"children {children:4d} positions {positions:3d} num_out "
                f"{num_out:3d}: {slices:3d} slices of {children // slices:3d}"
                f"{' (auto)' if auto else ''}: "
                f"{seconds * 1e3:8.1f} ms",
                flush=True,
            )
    if args.json:
        common.write_rows(args.json, args, rows)


if __name__ == "__main__":
    main()
