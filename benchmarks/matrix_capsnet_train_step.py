"""Training throughput and memory of MatrixCapsNet (EM routing).

Times `train_on_batch` of `keras_capsules.models.MatrixCapsNet` (Hinton,
Sabour & Frosst, "Matrix capsules with EM routing", ICLR 2018) on random
32x32 images, compiled with its official setting (Adam, spread loss), for
several batch sizes. For each batch size a fresh model is built and
compiled; after `--warmup` steps (the first one compiles the step), the
median of `--steps` timed steps gives the training images per second. The
peak resident memory of the process (and the accelerator peak, where there
is one) is read after each batch size; both are peaks since the process
started, so run the batch sizes in increasing order, as the default does.

Figures are comparable only between runs on the same backend, device and
versions, which the output records. `benchmarks/run.py` measures more
(inference, one process per point, the naive EM baseline side by side).

Usage:
    KERAS_BACKEND=jax python -m benchmarks.matrix_capsnet_train_step \\
        --batches 8,16,32 --config full --json results.json
    python -m benchmarks.matrix_capsnet_train_step --batches 2 --steps 2 \\
        --config small
"""

import argparse

import keras
import numpy as np

import keras_capsules
from benchmarks import common

CONFIGS = common.MATRIX_CAPSNET_CONFIGS
NUM_CLASSES = 5


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Benchmark MatrixCapsNet training steps."
    )
    parser.add_argument("--batches", type=common.int_list, default=[8, 16, 32],
                        help="Comma-separated batch sizes.")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="full")
    parser.add_argument("--routing-iterations", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10,
                        help="Timed steps; the median is reported.")
    parser.add_argument("--warmup", type=int, default=2,
                        help="Untimed steps first, the compiling one "
                        "included.")
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="Compile the step with XLA (TensorFlow) or "
                        "torch.compile (PyTorch); JAX always compiles. "
                        "Defaults to on for TensorFlow and JAX, off for "
                        "PyTorch.")
    parser.add_argument("--json", nargs="?", const="-", default=None,
                        metavar="PATH",
                        help="Print the results as JSON, and write them to "
                        "PATH when given.")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def _jit_compile(jit):
    return common.default_jit_compile(jit)


def benchmark_batch(args, batch_size):
    """Builds, compiles and times one model; returns a result dict."""
    keras.utils.clear_session()
    keras.utils.set_random_seed(args.seed)
    image_shape = (args.image_size, args.image_size, args.channels)
    model = keras_capsules.models.MatrixCapsNet(
        input_shape=image_shape,
        num_classes=NUM_CLASSES,
        routing_iterations=args.routing_iterations,
        **CONFIGS[args.config],
    )
    model.compile(jit_compile=_jit_compile(args.jit))
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((batch_size,) + image_shape).astype("float32")
    y = np.eye(NUM_CLASSES, dtype="float32")[
        rng.integers(0, NUM_CLASSES, size=batch_size)
    ]
    timing = common.time_train_steps(
        model, x, y, steps=args.steps, warmup=args.warmup
    )
    return {
        "batch_size": batch_size,
        "num_params": model.count_params(),
        **timing,
        "peak_rss_mib": common.peak_rss_mib(),
        "device_peak_mib": common.device_peak_mib(),
    }


def run(args):
    results = [benchmark_batch(args, size) for size in args.batches]
    return {
        "benchmark": "matrix_capsnet_train_step",
        "environment": common.environment(),
        "config": args.config,
        "routing_iterations": args.routing_iterations,
        "image_shape": [args.image_size, args.image_size, args.channels],
        "jit_compile": _jit_compile(args.jit),
        "timed_steps": args.steps,
        "warmup_steps": args.warmup,
        "results": results,
    }


def print_table(result):
    env = result["environment"]
    print(
        f"MatrixCapsNet ({result['config']}, "
        f"{result['routing_iterations']} routing iterations), "
        f"backend {env['backend']} on {env['device']}, "
        f"jit_compile={result['jit_compile']}, median of "
        f"{result['timed_steps']} steps"
    )
    print(f"{'batch':>6} {'img/s':>10} {'step ms':>10} {'compile s':>10} "
          f"{'peak RSS MiB':>13} {'device MiB':>11}")
    for row in result["results"]:
        device = row["device_peak_mib"]
        device = "-" if device is None else f"{device:.0f}"
        print(
            f"{row['batch_size']:>6} "
            f"{row['train_images_per_second']:>10.1f} "
            f"{row['step_seconds'] * 1000:>10.1f} "
            f"{row['compile_seconds']:>10.1f} "
            f"{row['peak_rss_mib']:>13.0f} {device:>11}"
        )


def main(argv=None):
    args = parse_args(argv)
    result = run(args)
    print_table(result)
    if args.json is not None:
        common.print_result(
            result, json_path=None if args.json == "-" else args.json
        )
    return result


if __name__ == "__main__":
    main()
