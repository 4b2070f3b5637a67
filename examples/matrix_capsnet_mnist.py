"""Matrix capsules with EM routing on MNIST.

Trains `keras_capsules.models.MatrixCapsNet` (Hinton, Sabour & Frosst,
"Matrix capsules with EM routing", ICLR 2018,
https://openreview.net/forum?id=HJWLfGWRb) on 28x28 MNIST digits with the
official training setting (google-research `capsule_em`): Adam, learning rate
0.01 decayed by 0.96 every 20,000 steps, batch 64, weight decay 2e-7, and a
spread loss whose margin grows from 0.2 to 0.9 (`SpreadMarginScheduler`).
Training images get random shifts of up to 2 pixels. It prints the backend,
the progress of `fit` and the test accuracy, saves the model as `.keras`,
and checks that the reloaded model predicts the same.

`--data tfds` reads MNIST through TensorFlow Datasets, prepared in
`--data-dir` or built offline from the four original `.gz` files in
`--manual-dir`; `--data sample` uses the 5,000/1,000-image sample that ships
with the package. `--smoke` runs one epoch of a few steps on a tiny network
(on the sample unless `--data` is given) to check that everything runs.

Usage:
    KERAS_BACKEND=jax python examples/matrix_capsnet_mnist.py \\
        --manual-dir ~/data/mnist --epochs 50
    python examples/matrix_capsnet_mnist.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import os

import keras
import numpy as np

import keras_capsules

NUM_CLASSES = 10
INPUT_SHAPE = (28, 28, 1)
# A, B, C and D of the paper: Conv1 filters, primary capsule types and the
# capsule types of the two convolutional capsule layers.
CONFIGS = {
    "full": {"A": 32, "B": 32, "C": 32, "D": 32},
    "small": {"A": 64, "B": 8, "C": 16, "D": 16},
    "tiny": {"A": 8, "B": 4, "C": 4, "D": 4},
}
SMOKE_STEPS = 3


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Train MatrixCapsNet (EM routing) on MNIST."
    )
    parser.add_argument(
        "--data",
        choices=("sample", "tfds"),
        default=None,
        help="MNIST source: the packaged sample or TensorFlow Datasets "
        "(default: tfds, or sample with --smoke).",
    )
    parser.add_argument("--manual-dir", default=None,
                        help="Folder with the original MNIST .gz files.")
    parser.add_argument("--data-dir", default=None,
                        help="TensorFlow Datasets data directory.")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help="Limit each epoch to this many steps.")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="full",
                        help="Capsule counts: the paper's full network "
                        "(A=B=C=D=32), its small one (64, 8, 16, 16) or a "
                        "tiny one for smoke runs.")
    parser.add_argument("--routing-iterations", type=int, default=3)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--decay-steps", type=int, default=20000)
    parser.add_argument("--decay-rate", type=float, default=0.96)
    parser.add_argument("--weight-decay", type=float, default=2e-7)
    parser.add_argument("--margin-schedule", choices=("linear", "sigmoid"),
                        default="linear",
                        help="Spread-loss margin schedule: the paper's "
                        "linear ramp or the official code's sigmoid.")
    parser.add_argument("--final-margin", type=float, default=0.9)
    parser.add_argument("--ramp-epochs", type=float, default=None,
                        help="Length of the margin ramp in epochs "
                        "(default: half of --epochs for the linear ramp, "
                        "the official 400k steps for the sigmoid).")
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="Compile the train step with XLA on "
                        "TensorFlow (JAX always does).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="matrix_capsnet_mnist.keras",
                        help="Where to save the trained model.")
    parser.add_argument("--smoke", action="store_true",
                        help="One epoch of a few steps on a tiny network.")
    args = parser.parse_args(argv)
    if args.smoke:
        args.epochs = 1
        args.steps_per_epoch = SMOKE_STEPS
        args.config = "tiny"
        args.routing_iterations = 1
        args.batch_size = min(args.batch_size, 16)
    if args.data is None:
        args.data = "sample" if args.smoke else "tfds"
    return args


def load_data(args):
    """Returns `(train, test)`: datasets, or `(x, y)` NumPy pairs."""
    mnist = keras_capsules.datasets.mnist
    if args.data == "sample":
        return mnist.load_sample("train"), mnist.load_sample("test")
    train = mnist.load(
        "train",
        batch_size=args.batch_size,
        manual_dir=args.manual_dir,
        data_dir=args.data_dir,
        seed=args.seed,
    )
    test = mnist.load(
        "test",
        batch_size=args.batch_size,
        manual_dir=args.manual_dir,
        data_dir=args.data_dir,
    )
    return train, test


def build_model(args):
    """A compiled MatrixCapsNet with the official training setting."""
    model = keras_capsules.models.MatrixCapsNet(
        input_shape=INPUT_SHAPE,
        num_classes=NUM_CLASSES,
        routing_iterations=args.routing_iterations,
        weight_decay=args.weight_decay,
        **CONFIGS[args.config],
    )
    optimizer = keras.optimizers.Adam(
        learning_rate=keras.optimizers.schedules.ExponentialDecay(
            args.learning_rate,
            decay_steps=args.decay_steps,
            decay_rate=args.decay_rate,
        )
    )
    jit_compile = "auto"
    if args.jit and keras.backend.backend() != "torch":
        jit_compile = True
    model.compile(optimizer=optimizer, jit_compile=jit_compile)
    return model


def margin_scheduler(args):
    ramp_epochs = args.ramp_epochs
    if ramp_epochs is None and args.margin_schedule == "linear":
        ramp_epochs = max(1, args.epochs // 2)
    return keras_capsules.callbacks.SpreadMarginScheduler(
        schedule=args.margin_schedule,
        final_margin=args.final_margin,
        ramp_epochs=ramp_epochs,
    )


def train_and_evaluate(args):
    """Trains, evaluates and saves; returns the test metrics."""
    keras.utils.set_random_seed(args.seed)
    train, test = load_data(args)
    model = build_model(args)
    model.summary()
    # The datasets shuffle themselves.
    fit_kwargs = {"shuffle": False}
    test_kwargs = {}
    if isinstance(train, tuple):
        x, y = train
        train = x
        fit_kwargs = {"y": y, "batch_size": args.batch_size, "shuffle": True}
        x_test, y_test = test
        test = x_test
        test_kwargs = {"y": y_test, "batch_size": args.batch_size}
    if args.smoke:
        test_kwargs["steps"] = SMOKE_STEPS
    model.fit(
        train,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=[margin_scheduler(args)],
        verbose=1,
        **fit_kwargs,
    )
    metrics = model.evaluate(test, return_dict=True, verbose=1,
                             **test_kwargs)
    print(f"Test accuracy: {metrics['accuracy']:.4f}")
    directory = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(directory, exist_ok=True)
    model.save(args.output)
    print(f"Saved the model to {args.output}")
    check_reload(model, args.output, first_images(test))
    return metrics


def first_images(data, size=8):
    """A few test images from a NumPy array or a batched dataset."""
    if isinstance(data, np.ndarray):
        return data[:size]
    for images, _ in data.take(1):
        return np.asarray(images)[:size]


def check_reload(model, path, images):
    """Reloads the `.keras` file and checks that it predicts the same."""
    loaded = keras.models.load_model(path)
    difference = np.max(
        np.abs(loaded.predict(images, verbose=0)
               - model.predict(images, verbose=0))
    )
    print(f"Reloaded {type(loaded).__name__}: largest difference in "
          f"class activations {difference:.2e}, spread margin "
          f"{float(keras.ops.convert_to_numpy(loaded.spread_margin)):.4f}")
    return difference


def main(argv=None):
    args = parse_args(argv)
    print(f"Backend: {keras.backend.backend()}")
    return train_and_evaluate(args)


if __name__ == "__main__":
    main()
