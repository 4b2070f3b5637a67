"""The path a user takes: a model's `compile()` with its defaults, then `fit`.

Where `benchmarks.run` times `train_on_batch` on one fixed batch, this
times what a new user runs: build the model, `compile()` with no
arguments (or with `--jit-compile`), `fit` NumPy arrays of random images
for `--epochs` epochs with Keras' progress bar off. It reports the wall
time of each epoch (the first includes tracing and compiling) and the
training images per second of the last one.

Usage:
    XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type= \\
    TF_CPU_ALLOCATOR_USE_BFC=true KERAS_BACKEND=tensorflow \\
        python -m benchmarks.plain_fit --model matrix_capsnet --preset small \\
        --images 3200 --epochs 2 --json plain.json
"""

import argparse
import json
import time

import keras
import numpy as np

import keras_capsules
from benchmarks.common import environment


class _EpochTimer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model",
        choices=("matrix_capsnet", "capsnet", "stacked_capsule_autoencoder"),
        default="capsnet",
    )
    parser.add_argument(
        "--preset",
        choices=("full", "small", "tiny"),
        default="small",
        help="MatrixCapsNet preset (the others use their own: CapsNet's "
        "defaults, StackedCapsuleAutoencoder's 'scae_mnist').",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=28,
        help="Height and width of the one-channel images (32 matches "
        "benchmarks.run's MatrixCapsNet; the 'scae_mnist' "
        "StackedCapsuleAutoencoder takes 40).",
    )
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--images", type=int, default=3200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument(
        "--jit-compile",
        choices=("default", "true", "false"),
        default="default",
        help="What to pass to compile(): nothing (default), or "
        "jit_compile=True/False.",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    shape = (args.image_size, args.image_size, 1)
    if args.model == "capsnet":
        model = keras_capsules.models.CapsNet(
            image_shape=shape, num_classes=args.classes
        )
    elif args.model == "matrix_capsnet":
        model = keras_capsules.models.MatrixCapsNet.from_preset(
            args.preset, image_shape=shape, num_classes=args.classes
        )
    else:
        model = keras_capsules.models.StackedCapsuleAutoencoder.from_preset(
            "scae_mnist"
        )
    kwargs = {}
    if args.jit_compile != "default":
        kwargs["jit_compile"] = args.jit_compile == "true"
    model.compile(**kwargs)
    x = rng.uniform(size=(args.images,) + shape).astype("float32")
    labels = rng.integers(0, args.classes, args.images)
    y = (
        labels  # the autoencoder's probes take integer labels
        if args.model == "stacked_capsule_autoencoder"
        else keras.utils.to_categorical(labels, args.classes)
    )
    timer = _EpochTimer()
    model.fit(
        x,
        y,
        batch_size=args.batch,
        epochs=args.epochs,
        callbacks=[timer],
        verbose=0,
    )
    result = {
        "model": args.model,
        "preset": {"matrix_capsnet": args.preset, "capsnet": None}.get(
            args.model, "scae_mnist"
        ),
        "image_shape": shape,
        "images": args.images,
        "batch": args.batch,
        "compile_argument": args.jit_compile,
        "jit_compile": model.jit_compile,
        "epoch_seconds": timer.seconds,
        "last_epoch_img_per_s": args.images / timer.seconds[-1],
        **environment(),
    }
    print(
        f"{args.model} {result['preset'] or ''} jit_compile="
        f"{model.jit_compile}: epochs "
        + ", ".join(f"{s:.1f} s" for s in timer.seconds)
        + f"; last epoch {result['last_epoch_img_per_s']:.1f} img/s"
    )
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)
    return result


if __name__ == "__main__":
    main()
