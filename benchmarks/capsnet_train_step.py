"""Training-step speed of CapsNet (Sabour et al., 2017) on one MNIST batch.

Builds the paper's CapsNet (8.2 M parameters with the decoder), compiles it
as `CapsNet.compile()` does (Adam, margin loss, accuracy), and times
`train_on_batch` on a fixed random batch of MNIST-shaped images (100 by
default): the median of `--steps` timed steps after `--warmup` steps, the
first of which includes tracing and compilation. Prints a JSON record with
training images per second, the compile time, the peak resident memory of
the process (and of the accelerator, when there is one), the backend, the
device and the library versions. `python -m benchmarks.run --model
capsnet` measures the same step, plus inference, in a fresh process.

Usage:
    KERAS_BACKEND=jax python -m benchmarks.capsnet_train_step
    KERAS_BACKEND=tensorflow python -m benchmarks.capsnet_train_step --no-jit
    KERAS_BACKEND=torch python -m benchmarks.capsnet_train_step \
        --batch 4 --steps 2 --json /tmp/capsnet.json
"""

import argparse
import os
import sys

import keras
import numpy as np

# Runnable both as `python -m benchmarks.capsnet_train_step` and as a file.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras_capsules  # noqa: E402
from benchmarks import common  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument(
        "--steps",
        type=int,
        default=10,
        help="Timed steps; the median is reported.",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="Untimed steps first, compilation included.",
    )
    parser.add_argument(
        "--jit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="jit_compile=True/False; default: True on TensorFlow and JAX, "
        "'auto' on PyTorch.",
    )
    parser.add_argument("--routing-iterations", type=int, default=3)
    parser.add_argument(
        "--decoder",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Include the reconstruction decoder and its loss.",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help="Also write the record to PATH.",
    )
    return parser.parse_args(argv)


def run(args):
    keras.utils.set_random_seed(args.seed)
    backend = keras.backend.backend()
    if args.jit is None:
        jit_compile = True if backend != "torch" else "auto"
    else:
        jit_compile = args.jit
    model = keras_capsules.models.CapsNet(
        routing_iterations=args.routing_iterations,
        decoder_units=(512, 1024) if args.decoder else None,
    )
    model.compile(jit_compile=jit_compile)
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(size=(args.batch, 28, 28, 1)).astype("float32")
    y = np.eye(10, dtype="float32")[rng.integers(0, 10, size=args.batch)]
    timing = common.time_train_steps(
        model, x, y, steps=args.steps, warmup=args.warmup
    )
    result = dict(common.environment())
    result.update(timing)
    result.update(
        {
            "benchmark": "capsnet_train_step",
            "batch_size": args.batch,
            "steps": args.steps,
            "warmup": args.warmup,
            "jit_compile": model.jit_compile,
            "routing_iterations": args.routing_iterations,
            "decoder": args.decoder,
            "num_params": model.count_params(),
            "peak_rss_mib": common.peak_rss_mib(),
            "device_peak_mib": common.device_peak_mib(),
        }
    )
    return result


def main(argv=None):
    args = parse_args(argv)
    print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
    result = run(args)
    print(
        f"{result['train_images_per_second']:.1f} img/s "
        f"(median step {result['step_seconds'] * 1e3:.1f} ms, batch "
        f"{result['batch_size']}), compile {result['compile_seconds']:.1f} "
        f"s, peak RSS {result['peak_rss_mib']:.0f} MiB"
    )
    common.print_result(result, json_path=args.json)
    return result


if __name__ == "__main__":
    main()
