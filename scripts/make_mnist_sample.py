"""Rebuilds `keras_capsules/datasets/mnist_sample.npz` from the MNIST files.

The sample holds 500 training images per class (5000) and 100 test images per
class (1000). For each class, the images are taken at evenly spaced positions
among that class's images in the original file, so the choice is fixed by the
data alone (no random generator whose stream could change between NumPy
versions) and spreads over the whole set. The arrays are stored as uint8 in a
zip archive with fixed timestamps, so the output is byte-for-byte
reproducible.

Usage:
    python scripts/make_mnist_sample.py --mnist_dir ../shared/data/mnist
"""

import argparse
import hashlib
import io
import os
import zipfile

import numpy as np

from keras_capsules.datasets import mnist

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DEFAULT_MNIST_DIR = os.path.join(_REPO, "..", "shared", "data", "mnist")
_DEFAULT_OUTPUT = os.path.join(
    _REPO, "keras_capsules", "datasets", "mnist_sample.npz"
)
_SPLITS = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 500),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 100),
}
# Any date works; a fixed one keeps the zip bytes independent of build time.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def select_indices(labels, per_class):
    """Returns sorted indices of `per_class` evenly spaced images per class."""
    chosen = []
    for label in range(mnist.NUM_CLASSES):
        candidates = np.flatnonzero(labels == label)
        positions = np.linspace(0, len(candidates) - 1, per_class)
        chosen.append(candidates[np.round(positions).astype(np.int64)])
    return np.sort(np.concatenate(chosen))


def build_arrays(mnist_dir):
    """Returns the dict of arrays stored in the sample file."""
    arrays = {}
    for split, (images_name, labels_name, per_class) in _SPLITS.items():
        images = mnist.read_idx(os.path.join(mnist_dir, images_name))
        labels = mnist.read_idx(os.path.join(mnist_dir, labels_name))
        indices = select_indices(labels, per_class)
        arrays[f"x_{split}"] = images[indices].astype(np.uint8)
        arrays[f"y_{split}"] = labels[indices].astype(np.uint8)
        arrays[f"index_{split}"] = indices.astype(np.int32)
    return arrays


def write_npz(path, arrays):
    """Writes `arrays` as a compressed `.npz` with reproducible bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(arrays):
            buffer = io.BytesIO()
            np.lib.format.write_array(
                buffer,
                np.ascontiguousarray(arrays[name]),
                allow_pickle=False,
            )
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, buffer.getvalue(), compresslevel=9)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mnist_dir",
        default=_DEFAULT_MNIST_DIR,
        help="Folder with the four original MNIST .gz idx files.",
    )
    parser.add_argument("--output", default=_DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    write_npz(args.output, build_arrays(args.mnist_dir))
    with open(args.output, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    size = os.path.getsize(args.output)
    print(f"Wrote {args.output} ({size} bytes, sha256 {digest}).")


if __name__ == "__main__":
    main()
