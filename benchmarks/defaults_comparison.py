"""Compares training settings of CapsNet and MatrixCapsNet, one run a call.

Each call trains one model under one setting for one epoch on the first
`--train-images` MNIST training images (no augmentation), scores it on
all 10,000 test images and appends one JSON line to `--jsonl`. The
settings are the ones `compile()` could use by default:

- `matrix_capsnet` (the small preset, batch 64): `compile_default`
  (`MatrixCapsNet.compile()` as it is), `official` (the official
  code's Adam 0.01 decayed by 0.96 every 20,000 steps),
  `exponential_0.02` (the same decay from 0.02, `compile()`'s default
  without `total_steps`), `exponential_0.04`, and `cosine_0.04` (a cosine
  decay from 0.04 to zero over the run, `compile(total_steps=...)`'s);
  Adam's epsilon is 1e-8 in all.
- `capsnet` (batch 100, `CapsNet.compile()`'s optimizer): `default`,
  `stop_gradient` (gradients only through the last routing iteration),
  `init_0.01` (DigitCaps transforms drawn from a normal of std 0.01),
  `bias` (a routing bias initialised to 0.1) and `port` (the first two
  together, no bias: XifengGuo/CapsNet-Pytorch's choices).

Usage:
    KERAS_BACKEND=jax python -m benchmarks.defaults_comparison \\
        --model capsnet --setting stop_gradient --seed 0 \\
        --data-dir path/to/mnist --jsonl out.jsonl
"""

import argparse
import json
import time

import keras
import numpy as np

import keras_capsules
from benchmarks import common
from keras_capsules.datasets import mnist

MATRIX_SETTINGS = (
    "compile_default",
    "official",
    "exponential_0.02",
    "exponential_0.04",
    "cosine_0.04",
)
CAPSNET_SETTINGS = ("default", "stop_gradient", "init_0.01", "bias", "port")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", choices=("capsnet", "matrix_capsnet"), required=True
    )
    parser.add_argument(
        "--setting", choices=MATRIX_SETTINGS + CAPSNET_SETTINGS, required=True
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-images", type=int, default=10000)
    parser.add_argument("--test-images", type=int, default=10000)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--jsonl", required=True)
    return parser.parse_args(argv)


def load(split, count, data_dir):
    if data_dir is None:  # the sample that ships with the package
        images, labels = mnist.load_sample(split)
        return images[:count], labels[:count]
    images, labels = mnist.load_arrays(split, manual_dir=data_dir)
    images = images[:count].astype("float32")[..., None] / 255.0
    return images, keras.utils.to_categorical(labels[:count], 10)


def matrix_capsnet(setting, steps, preset):
    model = keras_capsules.models.MatrixCapsNet.from_preset(
        preset, image_shape=(28, 28, 1), num_classes=10
    )
    if setting == "compile_default":
        model.compile()
        return model
    if setting == "official":
        model.compile(optimizer=common.official_matrix_optimizer())
        return model
    rate = float(setting.split("_")[1])
    if setting.startswith("cosine"):
        schedule = keras.optimizers.schedules.CosineDecay(rate, steps)
    else:
        schedule = keras.optimizers.schedules.ExponentialDecay(
            rate, decay_steps=20000, decay_rate=0.96
        )
    model.compile(optimizer=keras.optimizers.Adam(schedule, epsilon=1e-8))
    return model


def capsnet(setting, seed):
    model = keras_capsules.models.CapsNet(
        stop_gradient=setting in ("stop_gradient", "port"),
        routing_bias=setting == "bias",
    )
    if setting in ("init_0.01", "port"):
        kernel = model.digit_caps.kernel
        kernel.assign(keras.random.normal(kernel.shape, stddev=0.01, seed=seed))
    model.compile()
    return model


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    x, y = load("train", args.train_images, args.data_dir)
    x_test, y_test = load("test", args.test_images, args.data_dir)
    batch = 64 if args.model == "matrix_capsnet" else 100
    steps = -(-len(x) // batch)
    if args.model == "matrix_capsnet":
        model = matrix_capsnet(args.setting, steps, args.preset)
    else:
        model = capsnet(args.setting, args.seed)
    start = time.monotonic()
    history = model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
    seconds = time.monotonic() - start
    scores = model.predict(x_test, batch_size=500, verbose=0)
    if isinstance(scores, (tuple, list)):
        scores = scores[-1]
    accuracy = float(np.mean(scores.argmax(-1) == y_test.argmax(-1)))
    record = {
        "model": args.model,
        "setting": args.setting,
        "seed": args.seed,
        "train_images": len(x),
        "batch_size": batch,
        "steps": steps,
        "test_images": len(x_test),
        "test_accuracy": accuracy,
        "final_train_loss": float(history.history["loss"][-1]),
        "train_seconds": seconds,
        "backend": keras.backend.backend(),
    }
    print(json.dumps(record))
    with open(args.jsonl, "a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
