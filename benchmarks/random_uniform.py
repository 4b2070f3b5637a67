"""Time of one uniform draw of the SCAE's presence noise, by draw dtype.

The object capsule decoder adds uniform noise to `batch x 32 x 41`
presence logits at every training step (`keras_capsules/layers/
_presence_noise.py`). This script times `keras.random.uniform` of that
shape drawn in float32 and drawn in float64 then cast to float32 (what
`ops/_backend.draws_uniform_in_float64` chooses on TensorFlow), compiled
with XLA on TensorFlow and JAX and eagerly on PyTorch: the median of
`--steps` calls after one warm-up call, in milliseconds. JAX without
64-bit mode (its default) draws float32 when asked for float64: its two
rows are the same draw.

Usage:
    KERAS_BACKEND=tensorflow python -m benchmarks.random_uniform \\
        --shapes 128:32:41,128:40 --json random_uniform.json
"""

import argparse

import keras

from benchmarks import common


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--shapes",
        default="128:32:41,128:40",
        help="Comma-separated shapes, axes separated by colons.",
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def time_draw(shape, draw_dtype, steps):
    """Median seconds of one compiled draw (a SeedGenerator's next seed)."""
    if keras.backend.backend() == "jax":
        # A SeedGenerator's state is a variable, which jax.jit does not
        # update: a fixed seed, the same work.
        seed = keras.random.SeedGenerator(0).next()
    else:
        seed = keras.random.SeedGenerator(0)

    def draw():
        noise = keras.random.uniform(
            shape, -0.5, 0.5, dtype=draw_dtype, seed=seed
        )
        return keras.ops.sum(keras.ops.cast(noise, "float32"))

    return common.median_call_seconds(common.xla_compiled(draw) or draw, steps)


def main(argv=None):
    args = parse_args(argv)
    rows = []
    for text in args.shapes.split(","):
        shape = tuple(int(size) for size in text.split(":"))
        for draw_dtype in ("float32", "float64"):
            seconds = time_draw(shape, draw_dtype, args.steps)
            rows.append(
                {
                    "shape": list(shape),
                    "draw_dtype": draw_dtype,
                    "ms": round(seconds * 1e3, 2),
                }
            )
            print(
                f"{str(shape):15s} drawn in {draw_dtype}: "
                f"{seconds * 1e3:8.2f} ms",
                flush=True,
            )
    if args.json:
        common.write_rows(args.json, args, rows)


if __name__ == "__main__":
    main()
