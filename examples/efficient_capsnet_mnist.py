"""Efficient-CapsNet on MNIST with self-attention routing.

Trains `keras_capsules.models.EfficientCapsNet` (Mazzia, Salvetti &
Chiaberge, "Efficient-CapsNet: capsule network with self-attention
routing", Scientific Reports 2021,
https://doi.org/10.1038/s41598-021-93977-0) with the authors' settings:
batch 16, Adam at 5e-4 multiplied by 0.97 after every epoch down to 5e-5,
the margin loss plus 0.392 x the mean squared reconstruction error. The
authors augment with rotations, shifts, horizontal squeezes and small
erasures; this script shifts the training images by up to 2 pixels
(`keras_capsules.datasets.mnist.load(augment=True)`, Sabour et al.'s
augmentation), or not at all with `--no-augment`. It reports the test
accuracy (after every epoch with `--validate`), saves
`efficient_capsnet.keras`, reloads it and checks that the reloaded model
predicts the same, and draws test images above their reconstructions in
`reconstructions.png`.

`--data tfds` reads MNIST through TensorFlow Datasets, prepared in
`--data-dir` or built offline from the four original `.gz` files in
`--manual-dir`; `--data arrays` reads those files with NumPy (no
TensorFlow, no augmentation); `--data sample` uses the 5,000/1,000-image
sample that ships with the package (no augmentation). `--max-minutes`
stops training after that long, at the end of a step.

Usage:
    python examples/efficient_capsnet_mnist.py --manual-dir data/mnist \\
        --validate --max-minutes 75
    python examples/efficient_capsnet_mnist.py --data sample --epochs 5
    python examples/efficient_capsnet_mnist.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import math
import os

import _training
import keras
import numpy as np

import keras_capsules
from keras_capsules import visualization

SMOKE_STEPS = 2
NUM_TRAIN_IMAGES = 60000


def parse_args(argv=None):
    """Parses the command line; defaults are the authors' settings."""
    parser = argparse.ArgumentParser(
        description="Train Efficient-CapsNet (Mazzia et al., 2021) on MNIST."
    )
    parser.add_argument(
        "--data",
        choices=("tfds", "arrays", "sample"),
        default=None,
        help="'tfds': full MNIST through TensorFlow Datasets; 'arrays': "
        "the .gz files of --manual-dir read with NumPy; 'sample': the "
        "small sample embedded in the package. Defaults to 'tfds', or "
        "'sample' with --smoke.",
    )
    parser.add_argument(
        "--manual-dir",
        default=None,
        help="Folder with the four original MNIST .gz files, to build the "
        "TFDS dataset offline.",
    )
    parser.add_argument("--data-dir", default=None, help="TFDS data directory.")
    parser.add_argument(
        "--augment",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Shift training images randomly by up to 2 pixels (tfds only).",
    )
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="Training steps per epoch; all the data when omitted.",
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    _training.add_backup_argument(parser)
    _training.add_time_limit_argument(parser)
    parser.add_argument(
        "--output-dir",
        default=os.path.join("runs", "efficient_capsnet_mnist"),
        help="Where the model, reconstructions.png and results.json go.",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"1 epoch of {SMOKE_STEPS} steps on the embedded sample, to "
        "check that everything runs.",
    )
    args = parser.parse_args(argv)
    if args.data is None:
        args.data = "sample" if args.smoke else "tfds"
    if args.smoke:
        args.epochs = 1
        args.steps_per_epoch = SMOKE_STEPS
    return args


def load_data(args):
    """Returns `(train, test)`: `tf.data` datasets or `(x, y)` arrays."""
    if args.data == "arrays":
        mnist = keras_capsules.datasets.mnist
        return tuple(
            _arrays(*mnist.load_arrays(split, manual_dir=args.manual_dir))
            for split in ("train", "test")
        )
    return _training.load_mnist(args, SMOKE_STEPS, augment=args.augment)


def _arrays(images, labels):
    """Images in [0, 1] with a channel axis, one-hot labels."""
    x = images[..., None].astype("float32") / np.float32(255.0)
    return x, np.eye(10, dtype="float32")[labels]


def epoch_steps(args, train):
    """The steps of a whole epoch, for the decay of the learning rate."""
    if args.steps_per_epoch is not None:
        return args.steps_per_epoch
    num_images = len(train[0]) if isinstance(train, tuple) else NUM_TRAIN_IMAGES
    return math.ceil(num_images / args.batch_size)


def main(argv=None):
    args = parse_args(argv)
    print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
    keras.utils.set_random_seed(args.seed)
    train, test = load_data(args)
    model = keras_capsules.models.EfficientCapsNet()
    model.compile(
        steps_per_epoch=epoch_steps(args, train),
        jit_compile=_training.jit_compile(),
    )
    model.summary()
    results = _training.fit_within_time_limit(model, train, test, args)
    results["augment"] = args.augment and args.data == "tfds"

    model_path = os.path.join(args.output_dir, "efficient_capsnet.keras")
    images = _training.first_images(test)
    reloaded = _training.save_and_reload(model, model_path, images)
    # Written before the figure, which needs matplotlib.
    _training.write_results(results, args.output_dir)
    figure = visualization.reconstructions(images, reloaded.reconstruct(images))
    figure_path = os.path.join(args.output_dir, "reconstructions.png")
    figure.savefig(figure_path, dpi=100)
    print(f"Saved {figure_path}.")
    return results


if __name__ == "__main__":
    main()
