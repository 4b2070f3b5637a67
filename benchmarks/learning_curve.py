"""Learning curves of the EM networks on MNIST, over several seeds.

Trains on the first `--steps * --batch` MNIST training images, in order
(one pass, no augmentation), and measures the accuracy on the first
`--test-images` test images every `--every` steps. Each seed runs in this
process one after another; the curves, the arguments, the backend and the
CPU model go to `--json`. This is how the EM defaults were screened
(docs/design/em_routing_defaults.md).

Models (`--model`):

- `matrix_capsnet`: `keras_capsules.models.MatrixCapsNet` on 28x28 images
  with the official optimizer (`compile(schedule="official")`) and the
  accuracy metric (or Adam at `--learning-rate`) and a constant spread
  margin `--margin`;
- `functional`: a user's own `Conv2D -> PrimaryMatrixCaps -> EMConvCaps
  -> EMConvCaps -> EMClassCaps` model built with the layer defaults (ReLU
  Conv1, 5x5 stride 2; 3x3 stride 2 and 3x3 stride 1 capsule layers), Adam
  at `--learning-rate` and `SpreadLoss(margin)`;
- `capsnet`: `keras_capsules.models.CapsNet` with `compile()`'s defaults
  (or Adam at `--learning-rate`); the routing overrides do not apply.

Layer options can be overridden for the routed layers of the two EM models
(`--routing-normalization`, `--routing-mode`, `--routing-iterations`,
`--final-lambda`, `--lambda-scale`, `--min-variance`, `--conv-stddev`,
`--class-stddev`, `--beta`), which is how
the candidates were compared. A variant is a new layer built from the
layer's config with the overrides (`from_config`), never a built layer
with attributes changed: `MatrixCapsNet` is cloned with its routed layers
rebuilt that way (`keras.models.clone_model`), the functional model
constructs its layers with them.

Data: the four MNIST `.gz` files in `--mnist-dir` (read with
`keras_capsules.datasets.mnist.read_idx`), or `--mnist-dir sample` for the
5,000/1,000-image sample that ships with the package.

Usage:
    KERAS_BACKEND=tensorflow python -m benchmarks.learning_curve \\
        --model matrix_capsnet --mnist-dir ~/data/mnist --steps 200 \\
        --seeds 0,1,2 --json curves.json
"""

import argparse
import json
import os
import time

import keras
import numpy as np

import keras_capsules
from benchmarks import common
from benchmarks.common import MATRIX_CAPSNET_CONFIGS
from benchmarks.common import environment
from keras_capsules.datasets import mnist
from keras_capsules.ops.em import _core as em_core


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model",
        choices=("matrix_capsnet", "functional", "capsnet"),
        default="matrix_capsnet",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(MATRIX_CAPSNET_CONFIGS),
        default="small",
    )
    parser.add_argument(
        "--mnist-dir",
        required=True,
        help="Folder with the four MNIST .gz files, or "
        "'sample' for the packaged sample.",
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--test-images", type=int, default=2000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="Constant Adam learning rate. Defaults to the official "
        "schedule for matrix_capsnet, 0.01 for functional.",
    )
    parser.add_argument("--margin", type=float, default=0.2)
    parser.add_argument("--routing-normalization", default=None)
    parser.add_argument("--routing-mode", default=None)
    parser.add_argument("--routing-iterations", type=int, default=None)
    parser.add_argument("--final-lambda", type=float, default=None)
    parser.add_argument(
        "--lambda-scale",
        type=float,
        default=None,
        help="Multiplies the final_lambda of EMClassCaps.",
    )
    parser.add_argument("--min-variance", type=float, default=None)
    parser.add_argument("--conv-stddev", type=float, default=None)
    parser.add_argument("--class-stddev", type=float, default=None)
    parser.add_argument(
        "--beta",
        type=float,
        default=None,
        help="Initial beta_v and beta_a of routed layers.",
    )
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def load_data(args):
    train_size = args.steps * args.batch
    if args.mnist_dir == "sample":
        x_train, y_train = mnist.load_sample("train")
        x_test, y_test = mnist.load_sample("test")
        return (
            (x_train[:train_size], y_train[:train_size]),
            (x_test[: args.test_images], y_test[: args.test_images]),
        )

    def read(prefix, size):
        images = mnist.read_idx(
            os.path.join(args.mnist_dir, f"{prefix}-images-idx3-ubyte.gz")
        )[:size]
        labels = mnist.read_idx(
            os.path.join(args.mnist_dir, f"{prefix}-labels-idx1-ubyte.gz")
        )[:size]
        images = images.astype("float32")[..., None] / 255.0
        return images, np.eye(10, dtype="float32")[labels]

    return read("train", train_size), read("t10k", args.test_images)


def routed_overrides(args):
    """Layer keyword arguments for EMConvCaps and EMClassCaps.

    Initializers are given serialized, so that every layer built with them
    gets its own instance (an unseeded initializer instance repeats its
    draws).
    """
    common = {}
    if args.routing_normalization is not None:
        common["routing_normalization"] = args.routing_normalization
    if args.routing_mode is not None:
        common["routing_mode"] = args.routing_mode
    if args.routing_iterations is not None:
        common["routing_iterations"] = args.routing_iterations
    if args.final_lambda is not None:
        common["final_lambda"] = args.final_lambda
    if args.min_variance is not None:
        common["min_variance"] = args.min_variance
    if args.beta is not None:
        beta = _serialized(keras.initializers.Constant(args.beta))
        common["beta_v_initializer"] = beta
        common["beta_a_initializer"] = beta
    conv, dense = dict(common), dict(common)
    # Class capsules route densely: every child feeds every class.
    dense.pop("routing_normalization", None)
    if args.lambda_scale is not None:
        final_lambda = dense.get("final_lambda", em_core.DEFAULTS.final_lambda)
        dense["final_lambda"] = final_lambda * args.lambda_scale
    if args.conv_stddev is not None:
        conv["kernel_initializer"] = _serialized(
            keras.initializers.TruncatedNormal(stddev=args.conv_stddev)
        )
    if args.class_stddev is not None:
        dense["kernel_initializer"] = _serialized(
            keras.initializers.TruncatedNormal(stddev=args.class_stddev)
        )
    return conv, dense


def _serialized(initializer):
    return keras.initializers.serialize(initializer)


def with_overrides(model, overrides):
    """A copy of the functional `model` whose layers named in `overrides`
    are rebuilt from their config updated with `overrides[name]`.

    Every layer of the copy is new, with new weights; the copy is a plain
    `keras.Model`.
    """

    def rebuild(layer):
        config = {**layer.get_config(), **overrides.get(layer.name, {})}
        return type(layer).from_config(config)

    return keras.models.clone_model(model, clone_function=rebuild)


def build_model(args):
    if args.model == "capsnet":
        model = keras_capsules.models.CapsNet(
            image_shape=(28, 28, 1), num_classes=10
        )
        optimizer = "auto"
        if args.learning_rate is not None:
            optimizer = keras.optimizers.Adam(args.learning_rate)
        model.compile(optimizer=optimizer)
        return model
    conv_kwargs, class_kwargs = routed_overrides(args)
    config = MATRIX_CAPSNET_CONFIGS[args.preset]
    if args.model == "matrix_capsnet":
        model = keras_capsules.models.MatrixCapsNet(
            image_shape=(28, 28, 1), num_classes=10, **config
        )
        if conv_kwargs or class_kwargs:
            model = with_overrides(
                model,
                {
                    model.conv_caps1.name: conv_kwargs,
                    model.conv_caps2.name: conv_kwargs,
                    model.class_caps.name: class_kwargs,
                },
            )
        optimizer = common.official_matrix_optimizer()
        if args.learning_rate is not None:
            optimizer = keras.optimizers.Adam(args.learning_rate)
        model.compile(
            optimizer=optimizer,
            loss=keras_capsules.losses.SpreadLoss(margin=args.margin),
            metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
            jit_compile=keras.backend.backend() != "torch",
        )
        return model
    images = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(config["A"], 5, strides=2, activation="relu")(
        images
    )
    capsules = keras_capsules.layers.PrimaryMatrixCaps(config["B"])(x)
    capsules = keras_capsules.layers.EMConvCaps(
        config["C"], 3, strides=2, **conv_kwargs
    )(capsules)
    capsules = keras_capsules.layers.EMConvCaps(
        config["D"], 3, strides=1, **conv_kwargs
    )(capsules)
    _, activations = keras_capsules.layers.EMClassCaps(10, **class_kwargs)(
        capsules
    )
    model = keras.Model(images, activations)
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate or 0.01),
        loss=keras_capsules.losses.SpreadLoss(margin=args.margin),
        metrics=["accuracy"],
        jit_compile=keras.backend.backend() != "torch",
    )
    return model


def run_seed(args, seed, data):
    keras.utils.clear_session()
    keras.utils.set_random_seed(seed)
    (x_train, y_train), (x_test, y_test) = data
    model = build_model(args)
    curve = []
    start = time.perf_counter()
    for first in range(0, args.steps, args.every):
        last = min(first + args.every, args.steps)
        part = slice(first * args.batch, last * args.batch)
        history = model.fit(
            x_train[part],
            y_train[part],
            batch_size=args.batch,
            epochs=1,
            shuffle=False,
            verbose=0,
        )
        accuracy = model.evaluate(
            x_test, y_test, batch_size=200, return_dict=True, verbose=0
        )["accuracy"]
        loss = history.history["loss"][-1]
        curve.append(
            {"step": last, "test_accuracy": accuracy, "train_loss": loss}
        )
        print(
            f"seed {seed} step {last}: test accuracy {accuracy:.4f}, "
            f"train loss {loss:.4f} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    return {"seed": seed, "curve": curve}


def main(argv=None):
    args = parse_args(argv)
    data = load_data(args)
    seeds = [int(seed) for seed in args.seeds.split(",")]
    runs = [run_seed(args, seed, data) for seed in seeds]
    finals = [run["curve"][-1]["test_accuracy"] for run in runs]
    print(
        f"{keras.backend.backend()}: final test accuracy over seeds "
        f"{seeds}: mean {np.mean(finals):.4f}, min {min(finals):.4f}, "
        f"max {max(finals):.4f}"
    )
    if args.json:
        record = {
            "args": vars(args),
            **environment(),
            "runs": runs,
        }
        with open(args.json, "w") as file:
            json.dump(record, file, indent=1)
    return runs


if __name__ == "__main__":
    main()
