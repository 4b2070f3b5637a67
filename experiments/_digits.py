"""The protocol shared by the affine and viewpoint experiments.

Not a script: `affine_mnist.py` and `viewpoints_mnist.py` import it. Both
train on MNIST digits transformed on the fly (new positions or angles
every epoch), stop once a fixed test set of familiar digits is recognised
to a target accuracy, and then test on digits unlike those of training.
"""

import os
import time

import _common
import keras
import numpy as np

import keras_capsules
from keras_capsules.datasets import mnist


def add_arguments(parser, experiment, target, epochs):
    """Adds the stopping rule (`--target-accuracy`, default `target`,
    checked every `--check-every` steps on `--check-images` familiar test
    digits), `--model` and the common flags."""
    parser.add_argument(
        "--target-accuracy",
        type=float,
        default=target,
        help="Stop once the familiar test digits are recognised this "
        "well (measured on --check-images of them).",
    )
    parser.add_argument("--check-every", type=int, default=500)
    parser.add_argument("--check-images", type=int, default=2000)
    _common.add_common_arguments(
        parser,
        output_dir=None,
        epochs=epochs,
        batch_size=None,
    )
    parser.set_defaults(experiment=experiment)


def resolve_arguments(args):
    """Fills the defaults that depend on other flags: the output folder
    `runs/<experiment>_<model>`, batch 128 (64 for MatrixCapsNet), and a
    few steps with `--smoke`."""
    if args.output_dir is None:
        args.output_dir = os.path.join(
            "runs", f"{args.experiment}_{args.model}"
        )
    if args.batch_size is None:
        args.batch_size = 64 if args.model == "matrix_capsnet" else 128
    if args.smoke:
        args.epochs = 1
        args.batch_size = _common.SMOKE_BATCH_SIZE
        args.check_every = 1
        args.check_images = _common.SMOKE_BATCH_SIZE
    return args


def load_digits(args):
    """`(train, test)` digits; with `--smoke`, `--smoke` sizes: a few
    batches of training digits and `--check-images` test digits."""
    (train_images, train_labels), (test_images, test_labels) = (
        _common.load_digits(args)
    )
    if args.smoke:
        size = _common.SMOKE_STEPS * args.batch_size
        train_images, train_labels = train_images[:size], train_labels[:size]
        test_images = test_images[: args.check_images]
        test_labels = test_labels[: args.check_images]
    return (train_images, train_labels), (test_images, test_labels)


def correct(model, x, y, batch_size):
    """Whether the highest score of each of `x` is its label (one-hot)."""
    scores = keras.ops.convert_to_numpy(
        model.predict(x, batch_size=batch_size, verbose=0)
    )
    return scores.argmax(-1) == y.argmax(-1)


def accuracy(model, x, y, batch_size):
    """Fraction of `x` whose highest score is the label (one-hot `y`)."""
    return float(np.mean(correct(model, x, y, batch_size)))


class StopAtAccuracy(keras.callbacks.Callback):
    """Every `every` steps, measures the accuracy on `(x, y)` and stops
    training once it reaches `target`; keeps `(step, accuracy)` points in
    `curve`."""

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


def build_model(args, input_shape):
    """The model of `--model` (the small MatrixCapsNet, CapsNet or the
    pooled CNN baseline; tiny ones with `--smoke`), compiled with its
    defaults (MatrixCapsNet with its official schedule)."""
    if args.model == "cnn":
        return _common.sabour_cnn(input_shape)
    if args.model == "matrix_capsnet":
        model = keras_capsules.models.MatrixCapsNet.from_preset(
            "tiny" if args.smoke else "small",
            image_shape=input_shape,
            num_classes=mnist.NUM_CLASSES,
        )
    else:
        sizes = {}
        if args.smoke:
            sizes = dict(
                conv_filters=16, num_primary_capsules=4, decoder_units=(32,)
            )
        model = keras_capsules.models.CapsNet(image_shape=input_shape, **sizes)
        model.compile()
        return model
    # Runs stopped by an accuracy target have no length to decay a cosine
    # over: MatrixCapsNet takes the official schedule, as its measured
    # figures did.
    model.compile(optimizer=_common.official_matrix_optimizer())
    return model


def train_until_target(model, train, familiar, args):
    """Fits `model` on `train` (a `SeededBatches`) until `StopAtAccuracy`
    on the familiar test set `(x, y)` or `--max-minutes` stops it.

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
    time_limit = _common.TimeLimit(args.max_minutes)
    start = time.monotonic()
    model.fit(
        train,
        epochs=args.epochs,
        callbacks=_common.run_callbacks(args, train, stop, time_limit),
        # The batches come in their seeded order.
        shuffle=False,
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
    `results.json` in `--output-dir`."""
    model_path = os.path.join(args.output_dir, f"{args.model}.keras")
    _common.save_and_reload(model, model_path, images)
    results["model_path"] = model_path
    _common.write_results(results, args.output_dir)
