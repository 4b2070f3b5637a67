"""Novel viewpoints, an MNIST analogue: train on small rotations, test on
large ones.

Hinton, Sabour & Frosst, "Matrix capsules with EM routing" (ICLR 2018,
https://openreview.net/forum?id=HJWLfGWRb), section 5.1, train on
smallNORB toys seen from a subset of azimuths (or elevations), stop a
matrix-capsule network and a CNN at the same accuracy on test images from
those familiar viewpoints, and compare them on the viewpoints left out of
training. The smallNORB files are not used here; this script runs the
same protocol on an analogue made from MNIST, with the in-plane rotation
of the digit as the viewpoint (`datasets.affine_mnist.rotate`): it is not
a reproduction of the paper's experiment, whose viewpoints change the 3-D
view of an object.

The model trains on digits rotated by angles drawn uniformly from
`[-familiar, familiar]` degrees (`--familiar-angle`, new angles every
epoch). Every `--check-every` steps it is tested on `--check-images` test
digits rotated within the same range, and training stops once that
accuracy reaches `--target-accuracy` (or after `--max-minutes`). The
script then reports, on all 10,000 test digits, the accuracy on familiar
angles and on novel angles (magnitude drawn uniformly from `[familiar,
--novel-angle]`, either way), their difference, and the novel accuracy
per 15-degree band, in `results.json`, and saves the model. Rotation keeps
the 28x28 frame: strokes turned out of it are cut, which happens rarely,
since MNIST digits fit a 20x20 box in the middle.

`--model` picks the small MatrixCapsNet, CapsNet or the CNN baseline
(`_common.sabour_cnn`, with pooling), each compiled with its defaults.

Usage:
    python experiments/viewpoints_mnist.py --model matrix_capsnet \\
        --data-dir data/mnist
    python experiments/viewpoints_mnist.py --model cnn --data-dir data/mnist
    # Check that everything runs (a few steps on the embedded sample).
    python experiments/viewpoints_mnist.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse

import _common
import _digits
import keras
import numpy as np

from keras_capsules.datasets import affine_mnist

INPUT_SHAPE = (28, 28, 1)
# Seeds of the two fixed test sets, the same for every model.
FAMILIAR_TEST_SEED = 1
NOVEL_TEST_SEED = 2
BAND_DEGREES = 15


def parse_args(argv=None):
    """Parses the command line."""
    parser = argparse.ArgumentParser(
        description="Train on slightly rotated MNIST, test on larger angles."
    )
    parser.add_argument(
        "--model",
        choices=("matrix_capsnet", "capsnet", "cnn"),
        default="matrix_capsnet",
    )
    parser.add_argument(
        "--familiar-angle",
        type=float,
        default=30.0,
        help="Training and familiar test digits are rotated by up to this "
        "many degrees either way.",
    )
    parser.add_argument(
        "--novel-angle",
        type=float,
        default=90.0,
        help="Novel test digits are rotated by between --familiar-angle "
        "and this many degrees either way.",
    )
    _digits.add_arguments(parser, "viewpoints_mnist", target=0.98, epochs=20)
    args = parser.parse_args(argv)
    if not 0 <= args.familiar_angle < args.novel_angle <= 180:
        raise ValueError(
            "Expected 0 <= --familiar-angle < --novel-angle <= 180. "
            f"Received: familiar_angle={args.familiar_angle}, "
            f"novel_angle={args.novel_angle}"
        )
    return _digits.resolve_arguments(args)


def familiar_angles(num_images, seed, familiar):
    """Angles drawn uniformly from `[-familiar, familiar]` degrees."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-familiar, familiar, size=num_images)


def novel_angles(num_images, seed, familiar, novel):
    """Angles whose magnitude is drawn uniformly from `[familiar, novel]`
    degrees, with a random sign."""
    rng = np.random.default_rng(seed)
    magnitude = rng.uniform(familiar, novel, size=num_images)
    return magnitude * rng.choice([-1.0, 1.0], size=num_images)


def load_data(args):
    """The training batches, the familiar and novel test sets (each
    `(x, y)`) and the novel test digits' angles."""
    (train_images, train_labels), (test_images, test_labels) = (
        _digits.load_digits(args)
    )
    train = _common.transformed_digits(
        train_images,
        train_labels,
        args.batch_size,
        args.seed,
        lambda images, seed: affine_mnist.rotate(
            images, familiar_angles(len(images), seed, args.familiar_angle)
        ),
    )
    num_test = len(test_images)
    familiar = affine_mnist.rotate(
        test_images,
        familiar_angles(num_test, FAMILIAR_TEST_SEED, args.familiar_angle),
    )
    angles = novel_angles(
        num_test, NOVEL_TEST_SEED, args.familiar_angle, args.novel_angle
    )
    novel = affine_mnist.rotate(test_images, angles)
    y = _common.one_hot(test_labels)
    return (
        train,
        (_common.as_inputs(familiar), y),
        (_common.as_inputs(novel), y),
        angles,
    )


def accuracy_by_band(right, angles, args):
    """Accuracy per band of `BAND_DEGREES` degrees of rotation magnitude,
    from `right` (whether each novel digit was named right) and the
    digits' `angles`: a list of `[low, high, accuracy, count]`."""
    edges = np.append(
        np.arange(args.familiar_angle, args.novel_angle, BAND_DEGREES),
        args.novel_angle,
    )
    # Each band holds its lower edge; the last also its upper one.
    band = np.clip(
        np.searchsorted(edges, np.abs(angles), side="right") - 1,
        0,
        len(edges) - 2,
    )
    bands = []
    for i, (low, high) in enumerate(zip(edges[:-1], edges[1:])):
        inside = band == i
        if inside.any():
            bands.append(
                [
                    float(low),
                    float(high),
                    float(right[inside].mean()),
                    int(inside.sum()),
                ]
            )
    return bands


def main(argv=None):
    args = parse_args(argv)
    print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
    keras.utils.set_random_seed(args.seed)
    train, familiar, novel, angles = load_data(args)
    model = _digits.build_model(args, INPUT_SHAPE)
    print(f"{args.model}: {model.count_params():,} parameters")
    results = _digits.train_until_target(model, train, familiar, args)
    right = _digits.correct(model, *novel, args.batch_size)
    results.update(
        familiar_angle=args.familiar_angle,
        novel_angle=args.novel_angle,
        familiar_test_accuracy=_digits.accuracy(
            model, *familiar, args.batch_size
        ),
        novel_test_accuracy=float(right.mean()),
        novel_accuracy_by_band=accuracy_by_band(right, angles, args),
        test_images=len(familiar[0]),
    )
    results["difference"] = (
        results["familiar_test_accuracy"] - results["novel_test_accuracy"]
    )
    _digits.save_run(model, results, args, familiar[0][:4])
    return results


if __name__ == "__main__":
    main()
