"""Speed and memory of keras_capsules, side by side with a naive EM baseline.

One entry point for every benchmark. Each measurement point (model,
implementation, batch size, routing iterations) runs in a fresh Python
subprocess, because the peak resident memory of a process is a high-water
mark that only grows; the parent collects one JSON row per point. For
every point it reports:

- training images per second: the median of `--steps` timed
  `train_on_batch` calls on one fixed batch, after `--warmup` untimed ones
  (the first of which traces and compiles the step);
- inference images per second: the same for `predict_on_batch`;
- the compile time (the first training step, and the first prediction);
- the peak resident memory of the process (MiB), its growth from just
  before the model was built, and the accelerator's peak (None on CPU);
- the number of parameters, the backend, device, versions and
  `jit_compile`.

Models (`--model`):

- `capsnet`: CapsNet (Sabour et al. 2017) with its decoder, 28x28 MNIST
  images, batch 100 by default;
- `efficient_capsnet`: EfficientCapsNet (Mazzia et al. 2021), the MNIST
  network with its decoder, 28x28 images, batch 100 by default (it has no
  routing iterations: `--iterations` only labels its points);
- `matrix_capsnet`: MatrixCapsNet (Hinton et al. 2018) on 32x32 images,
  `--preset full` (A=B=C=D=32) or `small` (A=64, B=8, C=D=16);
- `em_conv_caps`: the single `EMConvCaps` layer as ConvCaps1 of the paper,
  14x14 input capsules to a 3x3 stride-2 window, 32 types to 32 (`full`)
  or 8 to 16 (`small`);
- `dense_caps`: the single `DenseCaps` layer as DigitCaps, 1152 8D
  capsules to 10 16D capsules.

The layers are wrapped in small functional models (the flattened outputs
against a random target with a mean squared error for `em_conv_caps`;
capsule lengths against one-hot labels with the margin loss for
`dense_caps`) so that `train_on_batch` and `predict_on_batch` apply.

For `matrix_capsnet` and `em_conv_caps`, `--impl both` (the default) also
measures `benchmarks/naive_em.py`: the same EM layer written as the
research ports write it (windows gathered by index, transforms tiled over
the batch, broadcast matmul, routing normalised within each window), with
the same weights and inputs. Points of the two implementations alternate,
so drift on a noisy machine hits both, and every (batch, iterations) pair
with both gets the ratios ours/naive: step time and throughput, training
and inference, and peak memory. A point that fails (an exception, a
non-zero exit, a kill for memory, `--timeout`) is recorded with its error
and the run goes on.

`--baseline-model` measures a second model in the same run, its points
alternating with those of `--model` at every batch size, with the ratios
of `--model` to it: `--model efficient_capsnet --baseline-model capsnet`.

`--official-checkout PATH` measures the official TensorFlow 1 code of
`capsnet` (Sarasra/models `research/capsules`) or `matrix_capsnet`
(google-research `capsule_em`) alternating with ours, on the same batch,
in the interpreter `--official-python` (Python 3.7 with TensorFlow 1.15),
with the ratios ours/official (`benchmarks/official_codes.py`).
`--repeats N` measures every point N times, the implementations
alternating, and the ratios take the medians of the N.

Lists of batch sizes and iterations give scaling curves;
`python -m benchmarks.plot` draws them from the JSON and fits straight
lines to them. `tests/benchmarks/naive_em_test.py` checks the naive layer
against `EMConvCaps` and the two benchmarked models against each other.

The models and their data are built in `benchmarks/models.py`, each point
runs through `benchmarks/runner.py`, and `benchmarks/report.py` writes the
table and the ratios.

Usage:
    KERAS_BACKEND=jax python -m benchmarks.run --model matrix_capsnet \\
        --preset full --batch 32 --iterations 3 --json matrix_full.json
    python -m benchmarks.run --model em_conv_caps --batch 1,2,4,8,16,32,64 \\
        --json em_batch.json
    python -m benchmarks.run --model em_conv_caps --batch 32 \\
        --iterations 1,2,3,4,5 --json em_iterations.json
    python -m benchmarks.run --model capsnet --batch 100 --no-jit
    python -m benchmarks.run --model efficient_capsnet \\
        --baseline-model capsnet --batch 100
    python -m benchmarks.run --model dense_caps --batch 100
    python -m benchmarks.run --model capsnet --batch 128 --repeats 2 \\
        --official-checkout models/research/capsules \\
        --official-python /path/to/tf1/bin/python
    python -m benchmarks.plot em_batch.json --out em_batch.png
"""

import argparse
import json
import os
import sys
import tempfile

import keras
import numpy as np

# Runnable both as `python -m benchmarks.run` and as a file.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import common  # noqa: E402
from benchmarks import models  # noqa: E402
from benchmarks import report  # noqa: E402
from benchmarks import runner  # noqa: E402

# The models whose official code `--official-checkout` times.
OFFICIAL_MODELS = ("capsnet", "matrix_capsnet")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model", choices=models.MODELS, default="matrix_capsnet"
    )
    parser.add_argument(
        "--baseline-model",
        choices=models.MODELS,
        default=None,
        help="A second model measured in the same run, alternating with "
        "--model, and the ratios of --model to it.",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(common.MATRIX_CAPSNET_CONFIGS),
        default="full",
        help="Size of matrix_capsnet and em_conv_caps (ignored otherwise).",
    )
    parser.add_argument(
        "--batch",
        type=common.int_list,
        default=None,
        help="Batch size, or comma-separated sizes. Defaults to 100 for "
        "capsnet and dense_caps, 32 otherwise.",
    )
    parser.add_argument(
        "--iterations",
        type=common.int_list,
        default=[3],
        help="Routing iterations, or a comma-separated list. Defaults to 3.",
    )
    parser.add_argument(
        "--jit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="jit_compile of the compiled steps (XLA on TensorFlow and "
        "JAX, torch.compile on PyTorch). Defaults to on for TensorFlow and "
        "JAX, off for PyTorch.",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=10,
        help="Timed steps per point; the median is reported. Defaults to 10.",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="Untimed steps first, the compiling one included. Defaults to 2.",
    )
    parser.add_argument(
        "--impl",
        choices=("ours", "naive", "both"),
        default=None,
        help="Implementation(s) to measure; naive exists for "
        "matrix_capsnet and em_conv_caps. Defaults to both for those, "
        "ours otherwise.",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="Image height and width of capsnet (default 28) and "
        "matrix_capsnet (default 32).",
    )
    parser.add_argument(
        "--official-checkout",
        default=None,
        metavar="PATH",
        help="Also time the official TensorFlow 1 code of --model, "
        "alternating with ours: for capsnet, the research/capsules folder "
        "of Sarasra/models; for matrix_capsnet, the folder that holds "
        "google-research's capsule_em/ (benchmarks/official_codes.py).",
    )
    parser.add_argument(
        "--official-python",
        default="python3.7",
        metavar="PATH",
        help="The interpreter, with TensorFlow 1.15, that runs the official "
        "code. Defaults to python3.7.",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="Measure every point this many times, the implementations "
        "alternating; the ratios take the medians. Defaults to 1.",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="Seconds allowed to each point. Defaults to 3600.",
    )
    parser.add_argument(
        "--json", default=None, metavar="PATH", help="Write the results here."
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        parser.error(
            "--steps and --warmup must be at least 1 (the first warm-up "
            f"step compiles). Received: --steps={args.steps} "
            f"--warmup={args.warmup}"
        )
    if args.repeats < 1:
        parser.error(
            f"--repeats must be at least 1. Received: --repeats={args.repeats}"
        )
    if args.official_checkout is not None:
        if args.model not in OFFICIAL_MODELS:
            parser.error(
                "--official-checkout: official codes are timed for "
                f"{', '.join(OFFICIAL_MODELS)}. Received: --model={args.model}"
            )
        if args.impl not in (None, "ours") or args.baseline_model:
            parser.error(
                "--official-checkout compares with --impl ours and no "
                f"--baseline-model. Received: --impl={args.impl} "
                f"--baseline-model={args.baseline_model}"
            )
        args.impl = "ours"
    if args.impl is None:
        args.impl = "both" if args.model in models.NAIVE_MODELS else "ours"
    if args.impl != "ours" and args.model not in models.NAIVE_MODELS:
        parser.error(
            f"--impl {args.impl}: the naive baseline exists only for "
            f"{', '.join(models.NAIVE_MODELS)}. Received: --model={args.model}"
        )
    if args.baseline_model is not None and (
        args.impl != "ours" or args.baseline_model == args.model
    ):
        parser.error(
            "--baseline-model needs --impl ours and another model than "
            f"--model. Received: --baseline-model={args.baseline_model}"
        )
    if args.batch is None:
        args.batch = [models.DEFAULT_BATCH[args.model]]
    if args.image_size is None:
        args.image_size = models.DEFAULT_IMAGE_SIZE.get(args.model)
    return args


def points(args):
    """Every measurement point; ours and naive (or the baseline model, or
    the official code) alternate at each pair, `--repeats` times. `variant`
    names a point in the ratios: its impl, or the baseline model's name."""
    variants = [
        (args.model, impl)
        for impl in (("ours", "naive") if args.impl == "both" else (args.impl,))
    ]
    if args.baseline_model is not None:
        variants.append((args.baseline_model, "ours"))
    if args.official_checkout is not None:
        variants.append((args.model, "official"))
    result = []
    for iterations in args.iterations:
        for batch_size in args.batch:
            for repeat in range(args.repeats):
                for model, impl in variants:
                    spec = {
                        "model": model,
                        "variant": impl if model == args.model else model,
                        "config": (
                            args.preset
                            if model in models.NAIVE_MODELS
                            else None
                        ),
                        "impl": impl,
                        "batch_size": batch_size,
                        "routing_iterations": iterations,
                        "image_size": (
                            args.image_size
                            if model == args.model
                            else models.DEFAULT_IMAGE_SIZE.get(model)
                        ),
                        "jit": args.jit,
                        "steps": args.steps,
                        "warmup": args.warmup,
                        "seed": args.seed,
                    }
                    if args.repeats > 1:
                        spec["repeat"] = repeat
                    if impl == "official":
                        spec["official_checkout"] = os.path.abspath(
                            args.official_checkout
                        )
                        spec["official_python"] = args.official_python
                        if model == "matrix_capsnet":
                            spec["official_architecture"] = (
                                common.MATRIX_CAPSNET_CONFIGS[args.preset]
                            )
                    result.append(spec)
    return result


def write_official_inputs(specs, folder):
    """Writes the batch of every official point to `folder` (the batch its
    `ours` point draws from the same seed) and sets its `inputs_path`."""
    for spec in specs:
        if spec["impl"] != "official":
            continue
        path = os.path.join(
            folder,
            f"{spec['model']}_{spec['batch_size']}_{spec['image_size']}_"
            f"{spec['seed']}.npz",
        )
        if not os.path.exists(path):
            x, y = models.batch(spec, np.random.default_rng(spec["seed"]))
            np.savez(path, x=x, y=y)
        spec["inputs_path"] = path


def run(args):
    """Measures every point of `args`; returns the result (the JSON)."""
    specs = points(args)
    with tempfile.TemporaryDirectory(prefix="keras_capsules_inputs_") as tmp:
        write_official_inputs(specs, tmp)
        rows = runner.run_points(specs, args.timeout)
    baseline = args.baseline_model or (
        "official" if args.official_checkout else "naive"
    )
    return {
        "benchmark": "run",
        "environment": runner.environment_from(rows),
        "flags": vars(args),
        "model": args.model,
        "config": args.preset if args.model in models.NAIVE_MODELS else None,
        "steps": args.steps,
        "warmup": args.warmup,
        "baseline": baseline,
        "rows": rows,
        "ratios": report.compute_ratios(rows, baseline),
    }


def main(argv=None):
    args = parse_args(argv)
    print(
        f"Keras {keras.__version__}, backend {keras.backend.backend()}; "
        "every point runs in its own process",
        flush=True,
    )
    result = run(args)
    print(report.format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
