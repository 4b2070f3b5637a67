"""Capsule networks and a CNN baseline on MultiMNIST: two overlapping digits.

The experiment of section 6 of Sabour, Frosst & Hinton, "Dynamic Routing
Between Capsules" (NeurIPS 2017, https://arxiv.org/abs/1710.09829): pairs of
MNIST digits of different classes, each shifted by up to 4 pixels in a
36x36 canvas, generated on the fly (`keras_capsules.datasets.multi_mnist`).
A pair counts as recognised when both digits are the two highest scores.

`--model capsnet` trains the paper's CapsNet on 36x36 inputs with
`num_objects=2`: the margin loss on both labels plus the reconstruction of
each digit from its own capsule. `--model cnn` trains the CNN baseline
(`_common.sabour_cnn`, sigmoid outputs). Both use Adam at 1e-3 decayed by
0.96 every 2000 steps. `--model efficient_capsnet` trains the MultiMNIST
network of Efficient-CapsNet (`EfficientCapsNet.from_preset("multimnist")`)
with its own `compile()` defaults (use `--batch-size 16`, the authors',
whose learning-rate decay counts epochs of 60,000 pairs).
The script reports the error rate on `--test-pairs` test pairs (always
the same pairs, seed 0), the number of training pairs seen and the wall
time in `results.json`, saves the model, and for CapsNet draws test pairs
above the reconstructions of their two digits in two colours
(`reconstructions.png`), what the dimensions of a digit capsule encode
(`perturbation_grid.png`) and where the routing sends the primary
capsules of a pair (`coupling_coefficients.png`); `--figures-from` draws
them again from a saved model.

The paper reports 5.2 % error for CapsNet and 8.1 % for its baseline,
after training on 60M pairs (1,000 per MNIST training image).

The training pairs are drawn anew every epoch, `--train-pairs` of them, in
NumPy (`multi_mnist.make_pairs`): batch `i` of epoch `e` from the seed
`(--seed, e, i)`, so a run resumed with `--backup-dir` draws the pairs of
the epochs it has left, as an uninterrupted run would. `--fixed-pairs`
makes `--train-pairs` pairs once and shuffles them every epoch instead.

Usage:
    # CapsNet, at most an hour of training on the original MNIST files.
    python experiments/multi_mnist.py --model capsnet --data-dir data/mnist \\
        --max-minutes 60
    python experiments/multi_mnist.py --model cnn --data-dir data/mnist
    # Check that everything runs (a few steps on the embedded sample).
    python experiments/multi_mnist.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import os
import time

import _common
import keras
import numpy as np

import keras_capsules
from keras_capsules.datasets import multi_mnist

TEST_SEED = 0


def parse_args(argv=None):
    """Parses the command line; defaults are the paper's settings."""
    parser = argparse.ArgumentParser(
        description="CapsNet against a CNN on MultiMNIST."
    )
    parser.add_argument(
        "--model",
        choices=("capsnet", "efficient_capsnet", "cnn"),
        default="capsnet",
    )
    parser.add_argument(
        "--train-pairs",
        type=int,
        default=60000,
        help="Training pairs per epoch.",
    )
    parser.add_argument(
        "--fixed-pairs",
        action="store_true",
        help="Make --train-pairs pairs once and reuse them every epoch "
        "(default: new pairs every epoch).",
    )
    parser.add_argument("--test-pairs", type=int, default=10000)
    parser.add_argument("--routing-iterations", type=int, default=3)
    parser.add_argument(
        "--figures-from",
        default=None,
        metavar="PATH",
        help="Only draw the figures of the CapsNet at PATH (a .keras file "
        "written by this script, or a preset) into --output-dir.",
    )
    _common.add_common_arguments(
        parser, output_dir=None, epochs=50, batch_size=128
    )
    args = parser.parse_args(argv)
    if args.output_dir is None:
        args.output_dir = os.path.join("runs", f"multi_mnist_{args.model}")
    if args.smoke:
        args.epochs = 1
        args.batch_size = _common.SMOKE_BATCH_SIZE
        args.train_pairs = _common.SMOKE_STEPS * args.batch_size
        args.test_pairs = args.batch_size
    return args


def training_pairs(images, labels, args):
    """The training batches: `(x, y)` of `make_pairs`, new pairs every
    epoch seeded by `(seed, epoch, batch)`, or with `--fixed-pairs` the
    same pairs every epoch in an order seeded by `(seed, epoch)`."""
    num_batches = -(-args.train_pairs // args.batch_size)

    def size(index):
        return min(args.batch_size, args.train_pairs - index * args.batch_size)

    if args.fixed_pairs:
        x, y = multi_mnist.make_pairs(
            images, labels, args.train_pairs, seed=args.seed
        )

        def make_batch(epoch, index):
            start = index * args.batch_size
            order = _common.epoch_order(args.seed, epoch, args.train_pairs)
            chosen = order[start : start + size(index)]
            return x[chosen], {name: v[chosen] for name, v in y.items()}

    else:

        def make_batch(epoch, index):
            seed = _common.batch_seed(args.seed, epoch, index)
            return multi_mnist.make_pairs(images, labels, size(index), seed)

    return _common.SeededBatches(num_batches, make_batch)


def load_data(args):
    """Returns the training batches and the `(x, y)` test pairs (always
    the same: seed 0)."""
    (train_images, train_labels), test_digits = _common.load_digits(args)
    train = training_pairs(train_images, train_labels, args)
    test = multi_mnist.make_pairs(*test_digits, args.test_pairs, TEST_SEED)
    return train, test


def labels_only(data):
    """The data with the 2-hot labels as the only target (for the CNN)."""
    if isinstance(data, tuple):
        return data[0], data[1]["labels"]
    make_batch = data.make_batch

    def labels(epoch, index):
        x, y = make_batch(epoch, index)
        return x, y["labels"]

    data.make_batch = labels
    return data


def build_model(args):
    """The compiled CapsNet (`num_objects=2`), EfficientCapsNet or CNN."""
    input_shape = (36, 36, 1)
    if args.model == "cnn":
        return _common.sabour_cnn(input_shape, num_labels=2)
    if args.model == "efficient_capsnet":
        model = keras_capsules.models.EfficientCapsNet.from_preset("multimnist")
        model.compile()
        return model
    sizes = {}
    if args.smoke:
        sizes = dict(
            conv_filters=16, num_primary_capsules=4, decoder_units=(32, 64)
        )
    model = keras_capsules.models.CapsNet(
        image_shape=input_shape,
        routing_iterations=args.routing_iterations,
        num_objects=2,
        **sizes,
    )
    model.compile()
    return model


def save_figures(model, test, output_dir, num_images=8):
    """Draws the CapsNet figures of the first test pairs into `output_dir`.

    `reconstructions.png`: pairs above the reconstructions of their two
    longest capsules, in red and green, titled with the labels and the
    predicted digits. `perturbation_grid.png`: the capsule of the first
    pair's first digit, each dimension swept over [-0.25, 0.25].
    `coupling_coefficients.png`: the routing coupling of the first pair's
    primary capsules to each class. Returns the paths.
    """
    from keras_capsules import visualization

    images, y = test[0][:num_images], test[1]
    labels = y["object_labels"][:num_images].argmax(-1)
    lengths = keras.ops.convert_to_numpy(model.predict(images, verbose=0))
    predicted = np.argsort(-lengths, axis=-1)[:, :2]
    titles = [f"{a}{b} / {c}{d}" for (a, b), (c, d) in zip(labels, predicted)]
    figures = {
        "reconstructions": visualization.reconstructions(
            images,
            keras.ops.convert_to_numpy(model.reconstruct(images)),
            titles=titles,
            output_names=["longest capsule", "second longest"],
        ),
        "perturbation_grid": visualization.perturbation_grid(
            model, images[0], label=int(labels[0, 0])
        ),
        "coupling_coefficients": visualization.coupling_coefficients(
            model, images[0]
        ),
    }
    figures["reconstructions"].suptitle(
        "labels / predicted (longest, second)", fontsize=9
    )
    paths = []
    for name, figure in figures.items():
        path = os.path.join(output_dir, f"{name}.png")
        figure.savefig(path, dpi=100)
        print(f"Saved {path}.")
        paths.append(path)
    return paths


def main(argv=None):
    args = parse_args(argv)
    print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
    keras.utils.set_random_seed(args.seed)
    train, test = load_data(args)
    if args.figures_from:
        os.makedirs(args.output_dir, exist_ok=True)
        model = _common.load_model(args.figures_from)
        return save_figures(model, test, args.output_dir)
    if args.model == "cnn":
        train, test = labels_only(train), labels_only(test)
    model = build_model(args)
    print(f"{args.model}: {model.count_params():,} parameters")
    time_limit = _common.TimeLimit(args.max_minutes)
    start = time.monotonic()
    model.fit(
        train,
        epochs=args.epochs,
        callbacks=_common.run_callbacks(args, train, time_limit),
        # The batches come in their seeded order.
        shuffle=False,
    )
    metrics = model.evaluate(
        *test, batch_size=args.batch_size, return_dict=True
    )
    wall_minutes = (time.monotonic() - start) / 60.0
    model_path = os.path.join(args.output_dir, f"{args.model}.keras")
    _common.save_and_reload(model, model_path, test[0][:4])
    results = {
        "model": args.model,
        "backend": keras.backend.backend(),
        "parameters": model.count_params(),
        # The optimizer's step count includes the epochs of a run
        # resumed with --backup-dir.
        "training_pairs_seen": int(model.optimizer.iterations)
        * args.batch_size,
        "steps": int(model.optimizer.iterations),
        "stopped_by_time_limit": time_limit.stopped,
        "test_pairs": args.test_pairs,
        "test_error_percent": 100.0 * (1.0 - float(metrics["accuracy"])),
        "minutes_train_and_test": wall_minutes,
        "seed": args.seed,
    }
    # Written before the figures, which need matplotlib.
    _common.write_results(results, args.output_dir)
    if args.model == "capsnet":
        results["figures"] = save_figures(model, test, args.output_dir)
    return results


if __name__ == "__main__":
    main()
