"""Data and stopping rule shared by the affine and viewpoint experiments.

Not a script: `affine_mnist.py`, `viewpoints_mnist.py` and `adversarial.py`
import it. Both experiments train on MNIST digits transformed on the fly
(new positions or angles every epoch), stop once a fixed test set of
familiar digits is recognised to a target accuracy, and then test on
digits the model has not seen in training.
"""

import json
import os
import time

import _baselines
import _training
import keras
import numpy as np

import keras_capsules
from keras_capsules.datasets import mnist

SMOKE_STEPS = 2
SMOKE_BATCH_SIZE = 8


def load_digits(args):
    """The MNIST `(train, test)` pairs of `(uint8 images, int labels)` that
    `--data`, `--manual-dir` and `--data-dir` pick; with `--smoke`, only
    `--check-images` test digits."""
    if args.data == "mnist":
        splits = [
            mnist.load_arrays(
                split, manual_dir=args.manual_dir, data_dir=args.data_dir
            )
            for split in ("train", "test")
        ]
    else:
        splits = []
        for split in ("train", "test"):
            x, y = mnist.load_sample(split)
            splits.append(
                (np.rint(x[..., 0] * 255).astype("uint8"), y.argmax(-1))
            )
    train, (test_images, test_labels) = splits
    if args.smoke:
        test_images = test_images[: args.check_images]
        test_labels = test_labels[: args.check_images]
    return train, (test_images, test_labels)


def one_hot(labels):
    """Integer labels as float32 one-hot rows of `mnist.NUM_CLASSES`."""
    return np.eye(mnist.NUM_CLASSES, dtype="float32")[labels]


def as_inputs(images):
    """uint8 `(N, H, W)` images as float32 `(N, H, W, 1)` in `[0, 1]`."""
    return (images.astype("float32") / np.float32(255.0))[..., None]


class TransformedDigits(keras.utils.PyDataset):
    """Batches of `transform(images, seed)` with one-hot labels.

    Every epoch shuffles the digits and draws a new seed per batch,
    reproducibly for a given `seed` (a run resumed with --backup-dir starts
    its stream again from the first epoch's).
    """

    def __init__(self, images, labels, batch_size, seed, transform, **kwargs):
        super().__init__(**kwargs)
        self.images = images
        self.labels = one_hot(labels)
        self.batch_size = batch_size
        self.seed = seed
        self.transform = transform
        self.epoch = 0
        self.order = self._order()

    def _order(self):
        rng = np.random.default_rng((self.seed, self.epoch))
        return rng.permutation(len(self.images))

    def __len__(self):
        return -(-len(self.images) // self.batch_size)

    def __getitem__(self, index):
        chosen = self.order[
            index * self.batch_size : (index + 1) * self.batch_size
        ]
        seed = int(
            np.random.SeedSequence(
                (self.seed, self.epoch, index)
            ).generate_state(1)[0]
        )
        x = self.transform(self.images[chosen], seed)
        return as_inputs(x), self.labels[chosen]

    def on_epoch_end(self):
        self.epoch += 1
        self.order = self._order()


def correct(model, x, y, batch_size):
    """Whether the highest score of each of `x` is its label (one-hot
    `y`)."""
    scores = keras.ops.convert_to_numpy(
        model.predict(x, batch_size=batch_size, verbose=0)
    )
    return scores.argmax(-1) == y.argmax(-1)


def accuracy(model, x, y, batch_size):
    """Fraction of `x` whose highest score is the label (one-hot `y`)."""
    return float(np.mean(correct(model, x, y, batch_size)))


class StopAtAccuracy(keras.callbacks.Callback):
    """Every `every` steps, measures the accuracy on `(x, y)` and stops
    training once it reaches `target`.

    Keeps the curve of `(step, accuracy)` in `curve`.
    """

    def __init__(self, x, y, target, every, batch_size):
        super().__init__()
        self.x, self.y = x, y
        self.target = target
        self.every = every
        self.batch_size = batch_size
        self.curve = []
        self.reached = False

    def on_train_begin(self, logs=None):
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        # Counted here: reading the optimizer's step on every batch would
        # sync the model's state on JAX.
        self.steps += 1
        if self.steps % self.every == 0:
            score = accuracy(self.model, self.x, self.y, self.batch_size)
            self.curve.append((self.steps, score))
            print(f"\nstep {self.steps}: familiar-test accuracy {score:.4f}")
            if score >= self.target:
                self.reached = True
                self.model.stop_training = True


def add_experiment_arguments(parser, experiment, target, epochs):
    """Adds the flags both experiments share, after their own: the MNIST
    source, the stopping rule (`--target-accuracy`, default `target`),
    `--epochs` (default `epochs`), `--batch-size`, `--max-minutes`,
    `--seed`, `--backup-dir`, `--output-dir` (default
    `runs/<experiment>_<model>`) and `--smoke`."""
    _training.add_mnist_source_arguments(parser)
    parser.add_argument(
        "--target-accuracy",
        type=float,
        default=target,
        help="Stop once the familiar test digits are recognised this "
        "well (measured on --check-images of them).",
    )
    parser.add_argument("--check-every", type=int, default=500)
    parser.add_argument("--check-images", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="Defaults to 128, or 64 for matrix_capsnet.",
    )
    _training.add_time_limit_argument(parser)
    parser.add_argument("--seed", type=int, default=0)
    _training.add_backup_argument(parser)
    parser.add_argument(
        "--output-dir",
        default=None,
        help="Where the model and results.json are written "
        f"(default: runs/{experiment}_<model>).",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_STEPS} steps of a small network on the embedded "
        "sample, to check that everything runs.",
    )


def resolve_arguments(args, experiment):
    """Fills the defaults of `add_experiment_arguments` that depend on
    other flags."""
    if args.output_dir is None:
        args.output_dir = os.path.join("runs", f"{experiment}_{args.model}")
    if args.batch_size is None:
        args.batch_size = 64 if args.model == "matrix_capsnet" else 128
    args.steps_per_epoch = None
    if args.data is None:
        args.data = "sample" if args.smoke else "mnist"
    if args.smoke:
        args.epochs = 1
        args.batch_size = SMOKE_BATCH_SIZE
        args.steps_per_epoch = SMOKE_STEPS
        args.check_every = 1
        args.check_images = SMOKE_BATCH_SIZE
    return args


def build_model(args, input_shape):
    """The model of `--model` (the small MatrixCapsNet, CapsNet or the
    pooled CNN baseline; tiny ones with `--smoke`), compiled with its
    defaults."""
    if args.model == "cnn":
        return _baselines.sabour_cnn(input_shape)
    if args.model == "matrix_capsnet":
        model = keras_capsules.models.MatrixCapsNet.from_preset(
            "tiny" if args.smoke else "small",
            input_shape=input_shape,
            num_classes=mnist.NUM_CLASSES,
        )
    else:
        sizes = {}
        if args.smoke:
            sizes = dict(
                conv_filters=16, num_primary_capsules=4, decoder_units=(32,)
            )
        model = keras_capsules.models.CapsNet(input_shape=input_shape, **sizes)
    model.compile()
    return model


def train_until_target(model, train, familiar, args):
    """Fits `model` on `train` until `StopAtAccuracy` on the familiar test
    set `(x, y)` or `--max-minutes` stops it.

    Returns the record of the run: what stopped it, the steps, images and
    minutes it took, and the curve of the checks.
    """
    stop = StopAtAccuracy(
        familiar[0][: args.check_images],
        familiar[1][: args.check_images],
        args.target_accuracy,
        args.check_every,
        args.batch_size,
    )
    time_limit = _training.TimeLimit(args.max_minutes)
    callbacks = [stop, time_limit]
    if args.backup_dir:
        callbacks.append(keras.callbacks.BackupAndRestore(args.backup_dir))
    if args.log_csv:
        callbacks.append(keras.callbacks.CSVLogger(args.log_csv, append=True))
    start = time.monotonic()
    model.fit(
        train,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=callbacks,
    )
    steps = int(model.optimizer.iterations)
    return {
        "model": args.model,
        "backend": keras.backend.backend(),
        "parameters": model.count_params(),
        "target_accuracy": args.target_accuracy,
        "reached_target": stop.reached,
        "stopped_by_time_limit": time_limit.stopped,
        "steps": steps,
        "training_images_seen": steps * args.batch_size,
        "train_minutes": (time.monotonic() - start) / 60.0,
        "check_curve": stop.curve,
        "seed": args.seed,
    }


def save_run(model, results, args, images):
    """Saves `model` (checking the reloaded one on `images`) and
    `results.json` in `--output-dir`, and prints the results."""
    os.makedirs(args.output_dir, exist_ok=True)
    model_path = os.path.join(args.output_dir, f"{args.model}.keras")
    _training.save_and_reload(model, model_path, images)
    results["model_path"] = model_path
    with open(os.path.join(args.output_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results, indent=1))
