"""CapsNet on MNIST with dynamic routing.

Trains the three-layer CapsNet of Sabour, Frosst & Hinton, "Dynamic Routing
Between Capsules" (NeurIPS 2017, https://arxiv.org/abs/1710.09829) with the
paper's settings: batch 128, Adam at 1e-3 decayed by 0.96 every 2000 steps,
3 routing iterations, margin loss plus 0.0005 x reconstruction loss, and
training images shifted by up to 2 pixels. It then reports the test
accuracy, saves `capsnet.keras`, reloads it and checks that the reloaded
model predicts the same, and draws test images above their
reconstructions in `reconstructions.png`.

The paper reports a 0.25% test error (3 routing iterations, with the
reconstruction loss and the shifts). With `--data sample`, training uses
the 5000-image sample embedded in the package (no download, no TensorFlow
Datasets, no augmentation) and evaluates on its 1000 test images.

`--max-minutes` stops training after that many minutes; `results.json`
keeps the test accuracy and the per-epoch history.

Usage:
    # Full MNIST, built offline from the four original .gz files.
    python examples/capsnet_mnist.py --data tfds --manual-dir data/mnist
    # Offline sample, a few epochs.
    python examples/capsnet_mnist.py --data sample --epochs 5
    # Check that everything runs (1 epoch of a few steps, sample data).
    python examples/capsnet_mnist.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import os

import _training
import keras

import keras_capsules

SMOKE_STEPS = 2
SMOKE_BATCH_SIZE = 16


def parse_args(argv=None):
    """Parses the command line; defaults are the paper's settings."""
    parser = argparse.ArgumentParser(
        description="Train CapsNet (Sabour et al., 2017) on MNIST."
    )
    parser.add_argument(
        "--data",
        choices=("tfds", "sample"),
        default=None,
        help="'tfds': full MNIST through TensorFlow Datasets; 'sample': "
        "the small sample embedded in the package. Defaults to 'tfds', or "
        "'sample' with --smoke.",
    )
    parser.add_argument(
        "--manual-dir",
        default=None,
        help="Folder with the four original MNIST .gz files, to build the "
        "TFDS dataset offline.",
    )
    parser.add_argument("--data-dir", default=None, help="TFDS data directory.")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="Training steps per epoch; all the data when omitted.",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="Defaults to 128, or 16 with --smoke.",
    )
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--decay-steps", type=int, default=2000)
    parser.add_argument("--decay-rate", type=float, default=0.96)
    parser.add_argument("--routing-iterations", type=int, default=3)
    parser.add_argument("--reconstruction-weight", type=float, default=0.0005)
    parser.add_argument("--seed", type=int, default=0)
    _training.add_backup_argument(parser)
    _training.add_time_limit_argument(parser)
    parser.add_argument(
        "--output-dir",
        default=os.path.join("runs", "capsnet_mnist"),
        help="Where capsnet.keras and reconstructions.png are written.",
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
    if args.batch_size is None:
        args.batch_size = SMOKE_BATCH_SIZE if args.smoke else 128
    if args.smoke:
        args.epochs = 1
        args.steps_per_epoch = SMOKE_STEPS
    return args


def load_data(args):
    """Returns `(train, test)`: `tf.data` datasets or `(x, y)` arrays."""
    # Paper, Section 5: shifts of up to 2 pixels, training images only.
    return _training.load_mnist(args, SMOKE_STEPS)


def build_model(args):
    """Returns a CapsNet compiled with the paper's optimizer and loss."""
    model = keras_capsules.models.CapsNet(
        input_shape=(28, 28, 1),
        num_classes=10,
        routing_iterations=args.routing_iterations,
        reconstruction_weight=args.reconstruction_weight,
    )
    model.compile(
        optimizer=_training.decayed_adam(args),
        jit_compile=_training.jit_compile(),
    )
    return model


def save_reconstructions(model, images, path):
    """Draws `images` (top row) over their reconstructions (bottom row).

    The decoder is fed the capsule of the predicted class, as at test time
    in the paper (Fig. 3).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    reconstructions = keras.ops.convert_to_numpy(model.reconstruct(images))
    num_images = len(images)
    figure, axes = plt.subplots(
        2, num_images, figsize=(num_images, 2.2), squeeze=False
    )
    for column in range(num_images):
        for row, picture in enumerate((images, reconstructions)):
            axes[row, column].imshow(
                picture[column, ..., 0], cmap="gray", vmin=0.0, vmax=1.0
            )
            axes[row, column].axis("off")
    axes[0, 0].set_title("input", fontsize=8, loc="left")
    axes[1, 0].set_title("reconstruction", fontsize=8, loc="left")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def train_and_evaluate(args):
    """Trains, evaluates, saves and reloads; returns a dict of results."""
    keras.utils.set_random_seed(args.seed)
    train, test = load_data(args)
    model = build_model(args)
    results = _training.fit_within_time_limit(model, train, test, args)

    model_path = os.path.join(args.output_dir, "capsnet.keras")
    images = _training.first_images(test)
    reloaded = _training.save_and_reload(model, model_path, images)
    figure_path = os.path.join(args.output_dir, "reconstructions.png")
    results.update(model_path=model_path, figure_path=figure_path)
    # Written before the figure, which needs matplotlib.
    _training.write_results(results, args.output_dir)
    save_reconstructions(reloaded, images, figure_path)
    print(f"Saved {figure_path}.")
    return results


def main(argv=None):
    args = parse_args(argv)
    print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
    return train_and_evaluate(args)


if __name__ == "__main__":
    main()
