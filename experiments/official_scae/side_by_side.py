"""What both sides of a side-by-side training run share (framework-free,
so that Python 3.7 and 3.11 import it): the batches, the test canvases,
the record files.

Training batch `step` of seed `seed`: 128 digits drawn with replacement
from the first 50,000 training digits and their offsets on the 40x40
canvas (the official `pad_and_shift`: 0 to 12 pixels down and right), from
`numpy.random.RandomState([seed, step])`, a legacy generator whose stream
is the same on every NumPy; so a run resumed at any step, on either side,
draws the same batches. The test canvases: the first `count` test digits
at offsets from `RandomState(1234)`, the same for every seed.
"""

from __future__ import print_function

import gzip
import json
import os

import numpy as np

CANVAS = 40
DIGIT = 28
TRAIN_DIGITS = 50000
BATCH = 128


def read_mnist(data_dir, split):
    """`(images uint8 (n, 28, 28), labels int64)` of `split` ("train" or
    "t10k") from the original `.gz` files."""
    with gzip.open(
        os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split)
    ) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16)
    with gzip.open(
        os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split)
    ) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images.reshape(-1, DIGIT, DIGIT), labels.astype(np.int64)


def place(digits, offsets):
    """Digits (n, 28, 28) uint8 at `offsets` (n, 2) on float32 canvases
    (n, 40, 40, 1) in [0, 1]."""
    canvases = np.zeros((len(digits), CANVAS, CANVAS, 1), np.float32)
    for n, (digit, (dy, dx)) in enumerate(zip(digits, offsets)):
        canvases[n, dy : dy + DIGIT, dx : dx + DIGIT, 0] = digit / 255.0
    return canvases


def batch(images, labels, seed, step, size=BATCH):
    """Training batch `step` of `seed`: `(canvases, labels)`."""
    rng = np.random.RandomState([seed, step])
    index = rng.randint(0, TRAIN_DIGITS, size)
    offsets = rng.randint(0, CANVAS - DIGIT + 1, (size, 2))
    return place(images[index], offsets), labels[index]


def test_canvases(images, labels, count):
    """The first `count` test digits on their fixed canvases."""
    rng = np.random.RandomState(1234)
    offsets = rng.randint(0, CANVAS - DIGIT + 1, (count, 2))
    return place(images[:count], offsets), labels[:count]


def append(path, record):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def add_arguments(parser):
    """The flags both sides take."""
    parser.add_argument("--out", default="/tmp/scae_side_by_side")
    parser.add_argument("--mnist", default="/work/shared/data/mnist")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--steps",
        type=int,
        default=3000,
        help="Train up to this step (resuming from the run's last save).",
    )
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=500)
    parser.add_argument("--test-images", type=int, default=10000)
    parser.add_argument(
        "--eval-batch",
        type=int,
        default=500,
        help="The official side's evaluation batch (ours predicts 500 at a time).",
    )
