"""Matrix capsules with EM routing on smallNORB.

Trains `keras_capsules.models.MatrixCapsNet` (Hinton, Sabour & Frosst,
"Matrix capsules with EM routing", ICLR 2018,
https://openreview.net/forum?id=HJWLfGWRb) on smallNORB, the paper's main
benchmark, with the official training setting (google-research
`capsule_em`): Adam, learning rate 0.01 decayed by 0.96 every 20,000 steps,
batch 64, weight decay 2e-7, and a spread loss whose margin grows from 0.2
to 0.9 (`SpreadMarginScheduler`). The images are the stereo pairs as two
channels, downsampled to 48x48, with random 32x32 crops and photometric
distortions for training and the central crop for testing
(`keras_capsules.datasets.smallnorb`). It prints the backend, the progress
of `fit` and the test accuracy, saves the model as `.keras`, checks that the
reloaded model predicts the same, and draws the capsule activations of a
test image next to it (`<model>_activations.png`).

The data comes from TensorFlow Datasets (prepared in `--data-dir`, or built
offline from the six original `.mat.gz` files in `--manual-dir`) or straight
from the original files (`--source files`). `--smoke` runs one epoch of a
few steps on a tiny network, on random images unless a data folder is
given, to check that everything runs.

Usage:
    KERAS_BACKEND=jax python examples/matrix_capsnet_smallnorb.py \\
        --manual-dir ~/data/smallnorb --epochs 50
    python examples/matrix_capsnet_smallnorb.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse

import _training
import keras
import numpy as np

import keras_capsules

NUM_CLASSES = 5
CROP_SIZE = 32
NUM_CHANNELS = 2


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Train MatrixCapsNet (EM routing) on smallNORB."
    )
    parser.add_argument(
        "--source",
        choices=("auto", "tfds", "files", "synthetic"),
        default=None,
        help="Data source of keras_capsules.datasets.smallnorb.load, or "
        "random images (default: auto, or synthetic with --smoke when no "
        "data folder is given).",
    )
    _training.add_matrix_capsnet_arguments(
        parser, "smallNORB files", "matrix_capsnet_smallnorb.keras"
    )
    args = _training.resolve_matrix_capsnet_arguments(parser.parse_args(argv))
    if args.source is None:
        has_data = args.manual_dir is not None or args.data_dir is not None
        args.source = "synthetic" if args.smoke and not has_data else "auto"
    return args


def synthetic_data(num_images, seed):
    """Standardised random stereo crops and labels, for smoke runs."""
    rng = np.random.default_rng(seed)
    shape = (num_images, CROP_SIZE, CROP_SIZE, NUM_CHANNELS)
    x = rng.standard_normal(shape).astype("float32")
    y = np.eye(NUM_CLASSES, dtype="float32")[
        rng.integers(0, NUM_CLASSES, size=num_images)
    ]
    return x, y


def load_data(args):
    """Returns `(train, test)`: datasets, or `(x, y)` NumPy pairs."""
    if args.source == "synthetic":
        size = args.batch_size * _training.MATRIX_SMOKE_STEPS
        return (
            synthetic_data(size, args.seed),
            synthetic_data(size, args.seed + 1),
        )
    smallnorb = keras_capsules.datasets.smallnorb
    common = {
        "batch_size": args.batch_size,
        "manual_dir": args.manual_dir,
        "data_dir": args.data_dir,
        "source": args.source,
        "crop_size": CROP_SIZE,
    }
    train = smallnorb.load("train", seed=args.seed, **common)
    test = smallnorb.load("test", **common)
    return train, test


def main(argv=None):
    args = parse_args(argv)
    print(f"Backend: {keras.backend.backend()}")
    return _training.train_matrix_capsnet(
        args, load_data, (CROP_SIZE, CROP_SIZE, NUM_CHANNELS), NUM_CLASSES
    )


if __name__ == "__main__":
    main()
