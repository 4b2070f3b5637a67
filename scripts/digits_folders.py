"""Writes scikit-learn's scanned digits as train and test image folders.

`sklearn.datasets.load_digits` holds 1,797 handwritten digits of the UCI
"Optical Recognition of Handwritten Digits" set: 8x8 images with 17 grey
levels, written by 43 people, a source other than MNIST's. This script
writes the digits of `--classes` as 28x28 grayscale PNG files in the
layout `examples/custom_images.py` reads, each digit scaled to 20x20 and
centred with a 4-pixel margin, bright ink on black, as in MNIST:

    <output-dir>/train/<digit>/<index>.png   (--train-per-class a class)
    <output-dir>/test/<digit>/<index>.png    (the rest of the class)

The training images of each class are drawn at random with `--seed`; the
test images are all the others, so a seed fixes the split.

scikit-learn is not a dependency of the package; install it to run this
script (`pip install scikit-learn`).

Usage:
    python scripts/digits_folders.py --output-dir runs/digits --seed 0
    python examples/custom_images.py --data-dir runs/digits/train \\
        --test-dir runs/digits/test --from-preset capsnet_mnist
"""

import argparse
import os

import numpy as np
from PIL import Image


def write_folders(images, labels, classes, train_per_class, seed, output):
    """Writes the images of `classes` as PNG files in `output/{train,test}`
    and returns `{split: {class: count}}`."""
    rng = np.random.default_rng(seed)
    counts = {"train": {}, "test": {}}
    for label in classes:
        indices = np.flatnonzero(labels == label)
        train = set(rng.choice(indices, train_per_class, replace=False))
        for index in indices:
            split = "train" if index in train else "test"
            folder = os.path.join(output, split, str(label))
            os.makedirs(folder, exist_ok=True)
            to_png(images[index]).save(os.path.join(folder, f"{index}.png"))
            counts[split][label] = counts[split].get(label, 0) + 1
    return counts


def to_png(image):
    """An 8x8 image of grey levels 0 to 16 as a 28x28 8-bit image: the
    digit scaled to 20x20 in the middle, as MNIST places its digits."""
    pixels = np.rint(image * (255 / 16)).astype("uint8")
    digit = Image.fromarray(pixels).resize((20, 20), Image.Resampling.BILINEAR)
    canvas = Image.new("L", (28, 28))
    canvas.paste(digit, (4, 4))
    return canvas


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default=os.path.join("runs", "digits"))
    parser.add_argument(
        "--classes",
        default="0,1,2,3,4",
        help="Comma-separated digits to write (default: 0 to 4).",
    )
    parser.add_argument(
        "--train-per-class",
        type=int,
        default=50,
        help="Training images per class; the others are the test set.",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="Draws the training images."
    )
    args = parser.parse_args()
    from sklearn.datasets import load_digits  # Only this script needs it.

    digits = load_digits()
    classes = [int(c) for c in args.classes.split(",")]
    counts = write_folders(
        digits.images,
        digits.target,
        classes,
        args.train_per_class,
        args.seed,
        args.output_dir,
    )
    for split, per_class in counts.items():
        print(f"{split}: {sum(per_class.values())} images, {per_class}")


if __name__ == "__main__":
    main()
