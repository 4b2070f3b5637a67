"""Training, evaluation and saving shared by the example scripts.

Not a script: the scripts import it, as `python examples/<script>.py` puts
this folder on `sys.path`. `train_matrix_capsnet` is the whole training run
of the two MatrixCapsNet scripts, which differ only in their data; the
smaller helpers also serve `capsnet_mnist.py`.
"""

import argparse
import json
import os
import time

import keras
import numpy as np

import keras_capsules
from keras_capsules.models import _official

# The official training setting, read from where `MatrixCapsNet.compile()`
# reads it, so the flags' defaults cannot drift from the model's.
OFFICIAL_LEARNING_RATE = _official.LEARNING_RATE
OFFICIAL_DECAY_STEPS = _official.DECAY_STEPS
OFFICIAL_DECAY_RATE = _official.DECAY_RATE
OFFICIAL_ADAM_EPSILON = _official.ADAM_EPSILON

MATRIX_SMOKE_STEPS = 3
# With the cosine decay to zero, Adam's starting rate 0.04 learned most in
# one epoch of MNIST of the rates 0.005-0.08 (the figures are in
# docs/design/em_routing_defaults.md); the official decay keeps the
# official rate.
COSINE_LEARNING_RATE = 0.04


def add_matrix_capsnet_arguments(parser, data_files, output):
    """Adds the MatrixCapsNet flags, with the official settings as defaults.

    Args:
        parser: The script's `argparse.ArgumentParser`, which already has
            its data-source flag.
        data_files: What `--manual-dir` holds, for the help text.
        output: The default path of the saved `.keras` model.
    """
    parser.add_argument(
        "--manual-dir",
        default=None,
        help=f"Folder with the original {data_files}.",
    )
    parser.add_argument(
        "--data-dir", default=None, help="TensorFlow Datasets data directory."
    )
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="Limit each epoch to this many steps.",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--preset",
        "--config",
        dest="preset",
        choices=sorted(keras_capsules.models.MatrixCapsNet.presets),
        default="full",
        help="MatrixCapsNet preset: the paper's full network "
        "(A=B=C=D=32), its small one (64, 8, 16, 16) or a "
        "tiny one for smoke runs. --config is an alias, kept for one "
        "release.",
    )
    parser.add_argument(
        "--routing-iterations",
        type=int,
        default=None,
        help="EM routing iterations of every routed layer "
        "(default: the layers' default, 2).",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="Adam's starting learning rate (default: "
        f"{OFFICIAL_LEARNING_RATE} with the exponential "
        f"decay, the official rate; {COSINE_LEARNING_RATE} "
        "with the cosine decay).",
    )
    parser.add_argument(
        "--lr-schedule",
        choices=("exponential", "cosine"),
        default="exponential",
        help="Learning-rate schedule: the official "
        "exponential decay (--decay-steps, --decay-rate) "
        "or a cosine decay to zero over the whole run.",
    )
    parser.add_argument("--decay-steps", type=int, default=OFFICIAL_DECAY_STEPS)
    parser.add_argument("--decay-rate", type=float, default=OFFICIAL_DECAY_RATE)
    parser.add_argument("--weight-decay", type=float, default=2e-7)
    parser.add_argument(
        "--adam-epsilon",
        type=float,
        default=OFFICIAL_ADAM_EPSILON,
        help=f"Adam's epsilon: the official code's {OFFICIAL_ADAM_EPSILON} "
        "(Keras' default is 1e-7, which damps the steps of the transforms "
        "whose gradients are smaller).",
    )
    parser.add_argument(
        "--margin-schedule",
        choices=("linear", "sigmoid"),
        default="linear",
        help="Spread-loss margin schedule: the paper's "
        "linear ramp or the official code's sigmoid.",
    )
    parser.add_argument("--final-margin", type=float, default=0.9)
    parser.add_argument(
        "--ramp-epochs",
        type=float,
        default=None,
        help="Length of the margin ramp in epochs "
        "(default: half of --epochs for the linear ramp, "
        "the official 400k steps for the sigmoid).",
    )
    parser.add_argument(
        "--jit",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Compile the train step with XLA on TensorFlow (JAX always does).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output", default=output, help="Where to save the trained model."
    )
    add_backup_argument(parser)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="One epoch of a few steps on a tiny network.",
    )


def add_backup_argument(parser):
    """Adds `--backup-dir` (`keras.callbacks.BackupAndRestore`), and the
    per-epoch records `--validate` and `--log-csv` that go with long runs.

    An interrupted run started again with the same flags resumes from the
    last finished epoch: weights, optimizer state (so the learning-rate
    schedule's step) and the model's `spread_margin` variable come back.
    """
    parser.add_argument(
        "--backup-dir",
        default=None,
        help="Back up the training state here after every "
        "epoch and resume from it when the run is started "
        "again (keras.callbacks.BackupAndRestore); deleted "
        "when training finishes.",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="Evaluate on the test set after every epoch "
        "(val_accuracy in the logs).",
    )
    parser.add_argument(
        "--log-csv",
        default=None,
        help="Append every epoch's logs to this CSV file "
        "(keras.callbacks.CSVLogger), so that a resumed run "
        "keeps one learning curve.",
    )


def add_mnist_source_arguments(parser):
    """Adds `--data`, `--manual-dir` and `--data-dir`: where the MNIST
    digits of the MultiMNIST and affine experiments come from."""
    parser.add_argument(
        "--data",
        choices=("mnist", "sample"),
        default=None,
        help="'mnist': the MNIST split from --manual-dir (the original idx "
        "files) or from the prepared TFDS `mnist` in --data-dir; 'sample': "
        "the 5,000/1,000-image sample embedded in the package. Defaults to "
        "'mnist', or 'sample' with --smoke.",
    )
    parser.add_argument(
        "--manual-dir",
        default=None,
        help="Folder with the original MNIST idx files (.gz or not).",
    )
    parser.add_argument("--data-dir", default=None, help="TFDS data directory.")


def add_time_limit_argument(parser):
    """Adds `--max-minutes`, read by `TimeLimit`."""
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="Stop training after this many minutes, at the end of a step "
        "(a run stopped so is finished: its --backup-dir is removed).",
    )


class TimeLimit(keras.callbacks.Callback):
    """Stops training once `minutes` have passed since it started (never
    with `minutes=None`); `stopped` says whether it did."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = None if minutes is None else 60.0 * minutes
        self.stopped = False

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds and time.monotonic() - self.start > self.seconds:
            self.model.stop_training = True
            self.stopped = True


def resolve_matrix_capsnet_arguments(args):
    """Fills the flags whose defaults depend on others.

    The learning rate follows the schedule when not given; with `--smoke`,
    one epoch of a few steps on the tiny network.
    """
    if args.learning_rate is None:
        args.learning_rate = (
            COSINE_LEARNING_RATE
            if args.lr_schedule == "cosine"
            else OFFICIAL_LEARNING_RATE
        )
    if args.smoke:
        args.epochs = 1
        args.steps_per_epoch = MATRIX_SMOKE_STEPS
        args.preset = "tiny"
        args.routing_iterations = 1
        args.batch_size = min(args.batch_size, 16)
    return args


def train_matrix_capsnet(
    args, load_data, input_shape, num_classes, build_model=None
):
    """Trains, evaluates and saves a MatrixCapsNet; returns the metrics.

    Args:
        args: The parsed flags of `add_matrix_capsnet_arguments`.
        load_data: Function of `args` returning `(train, test)`, each a
            batched dataset or an `(x, y)` pair of NumPy arrays.
        input_shape: `(height, width, channels)` of the images.
        num_classes: The number of classes.
        build_model: Optional function of `(args, input_shape,
            num_classes)` returning `(model, compile_kwargs)`, for a model
            other than `MatrixCapsNet`; the optimizer and `jit_compile`
            are added to `compile_kwargs` here.
    """
    keras.utils.set_random_seed(args.seed)
    train, test = load_data(args)
    build_model = build_model or build_matrix_capsnet
    model, compile_kwargs = build_model(args, input_shape, num_classes)
    model.compile(
        optimizer=decayed_adam(args, train),
        jit_compile=jit_compile(args.jit),
        **compile_kwargs,
    )
    model.summary()
    metrics = fit_and_evaluate(
        model,
        train,
        test,
        args,
        callbacks=[spread_margin_scheduler(args)],
        evaluate_steps=MATRIX_SMOKE_STEPS if args.smoke else None,
    )
    images = first_images(test)
    loaded = save_and_reload(model, args.output, images)
    if isinstance(loaded, keras_capsules.models.MatrixCapsNet):
        save_activation_maps(loaded, images[0], args.output)
    # MatrixCapsNet owns its margin; another model's lives in its loss.
    margin = getattr(loaded, "spread_margin", None)
    if margin is None:
        margin = loaded.loss.margin
    margin = float(keras.ops.convert_to_numpy(margin))
    print(f"Spread margin of the reloaded model: {margin:.4f}")
    return metrics


def save_activation_maps(model, image, model_path):
    """Draws the capsule activations of `image` next to the saved model,
    as `<model name>_activations.png`."""
    from keras_capsules import visualization

    path = os.path.splitext(model_path)[0] + "_activations.png"
    figure = visualization.activation_maps(model, image, max_types=16)
    figure.savefig(path, dpi=100)
    print(f"Saved {path}.")
    return path


def build_matrix_capsnet(args, input_shape, num_classes):
    """`MatrixCapsNet` of `--preset`; `compile()` supplies its loss."""
    options = {}
    if args.routing_iterations is not None:
        options["routing_iterations"] = args.routing_iterations
    model = keras_capsules.models.MatrixCapsNet.from_preset(
        args.preset,
        input_shape=input_shape,
        num_classes=num_classes,
        weight_decay=args.weight_decay,
        **options,
    )
    return model, {}


def decayed_adam(args, train=None):
    """Adam with a decaying learning rate.

    Reads `--learning-rate` and `--lr-schedule` (if the parser has it; else
    exponential): the exponential decay of both papers (`--decay-steps`,
    `--decay-rate`), or a cosine decay to zero over all the steps of the
    run, which `train` (a batched dataset or an `(x, y)` pair) then counts.
    Adam's epsilon is `--adam-epsilon` if the parser has it (the
    MatrixCapsNet flags), else Keras' default.
    """
    if getattr(args, "lr_schedule", "exponential") == "cosine":
        schedule = keras.optimizers.schedules.CosineDecay(
            args.learning_rate,
            decay_steps=args.epochs * steps_per_epoch(args, train),
        )
    else:
        schedule = keras.optimizers.schedules.ExponentialDecay(
            args.learning_rate,
            decay_steps=args.decay_steps,
            decay_rate=args.decay_rate,
        )
    options = {}
    if hasattr(args, "adam_epsilon"):  # only the MatrixCapsNet flags have it
        options["epsilon"] = args.adam_epsilon
    return keras.optimizers.Adam(learning_rate=schedule, **options)


def steps_per_epoch(args, train):
    """Training steps in one epoch: `--steps-per-epoch` or all of `train`."""
    if args.steps_per_epoch:
        return args.steps_per_epoch
    if isinstance(train, tuple):
        return -(-len(train[0]) // args.batch_size)
    steps = int(train.cardinality())
    if steps < 1:
        raise ValueError(
            "The training dataset has no known length; pass "
            f"--steps-per-epoch. Received: cardinality={steps}"
        )
    return steps


def jit_compile(enabled=True):
    """The `jit_compile` argument of `compile`.

    XLA fuses the unrolled routing loops on TensorFlow and JAX;
    torch.compile is left to `"auto"`.
    """
    if enabled and keras.backend.backend() != "torch":
        return True
    return "auto"


def spread_margin_scheduler(args):
    """The spread-loss margin schedule of `--margin-schedule` and friends."""
    ramp_epochs = args.ramp_epochs
    if ramp_epochs is None and args.margin_schedule == "linear":
        ramp_epochs = max(1, args.epochs // 2)
    return keras_capsules.callbacks.SpreadMarginScheduler(
        schedule=args.margin_schedule,
        final_margin=args.final_margin,
        ramp_epochs=ramp_epochs,
    )


def fit_and_evaluate(
    model, train, test, args, callbacks=(), evaluate_steps=None
):
    """Fits `model` on `train` and returns its metrics on `test`.

    `train` and `test` are batched datasets, which shuffle themselves, or
    `(x, y)` pairs of NumPy arrays, batched by `--batch-size`.
    """
    callbacks = list(callbacks)
    if getattr(args, "backup_dir", None):
        callbacks.append(keras.callbacks.BackupAndRestore(args.backup_dir))
    if getattr(args, "log_csv", None):
        callbacks.append(keras.callbacks.CSVLogger(args.log_csv, append=True))
    fit_kwargs = dict(
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=callbacks,
        verbose=1,
    )
    if getattr(args, "validate", False):
        fit_kwargs.update(validation_data=test, validation_steps=evaluate_steps)
    evaluate_kwargs = dict(steps=evaluate_steps, return_dict=True, verbose=1)
    if isinstance(train, tuple):
        model.fit(
            *train,
            batch_size=args.batch_size,
            validation_batch_size=args.batch_size,
            shuffle=True,
            **fit_kwargs,
        )
        metrics = model.evaluate(
            *test, batch_size=args.batch_size, **evaluate_kwargs
        )
    else:
        model.fit(train, shuffle=False, **fit_kwargs)
        metrics = model.evaluate(test, **evaluate_kwargs)
    print(f"Test accuracy: {metrics['accuracy']:.4f}")
    return metrics


def fit_within_time_limit(model, train, test, args):
    """`fit_and_evaluate`, stopped after `--max-minutes`.

    Returns the run's record for `results.json`: the test metrics, whether
    the time limit stopped training, the minutes of training and testing,
    the batch size, the epochs begun, the per-epoch history and the seed.
    """
    time_limit = TimeLimit(args.max_minutes)
    start = time.monotonic()
    metrics = fit_and_evaluate(model, train, test, args, callbacks=[time_limit])
    history = model.history.history
    return {
        "backend": keras.backend.backend(),
        "test_accuracy": float(metrics["accuracy"]),
        "test_loss": float(metrics["loss"]),
        "stopped_by_time_limit": time_limit.stopped,
        "minutes_train_and_test": (time.monotonic() - start) / 60,
        "batch_size": args.batch_size,
        "epochs": len(history["loss"]),
        "history": history,
        "seed": args.seed,
    }


def write_results(results, output_dir):
    """Writes `results` to `results.json` in `output_dir`."""
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "results.json"), "w") as file:
        json.dump(results, file, indent=1)


def load_mnist(args, smoke_steps, augment=True):
    """Returns `(train, test)` for `--data sample` (the embedded arrays) or
    `tfds` (`tf.data` datasets, training images shifted by up to 2 pixels
    when `augment`); with `--smoke`, only `smoke_steps` test batches."""
    mnist = keras_capsules.datasets.mnist
    if args.data == "sample":
        train, test = mnist.load_sample("train"), mnist.load_sample("test")
        if args.smoke:
            test = tuple(a[: smoke_steps * args.batch_size] for a in test)
        return train, test
    common = dict(
        batch_size=args.batch_size,
        manual_dir=args.manual_dir,
        data_dir=args.data_dir,
        seed=args.seed,
    )
    train = mnist.load("train", augment=augment, **common)
    test = mnist.load("test", augment=False, **common)
    if args.smoke:
        test = test.take(smoke_steps)
    return train, test


def first_images(data, size=8):
    """Up to `size` images of a batched dataset or an `(x, y)` pair."""
    if isinstance(data, tuple):
        return np.asarray(data[0][:size])
    for images, _ in data.take(1):
        return np.asarray(images)[:size]


def save_and_reload(model, path, images):
    """Saves `model` as `.keras`, reloads it and checks its predictions.

    Returns the reloaded model; raises if it predicts `images` otherwise.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(
        loaded.predict(images, verbose=0),
        model.predict(images, verbose=0),
        atol=1e-5,
        err_msg="the reloaded model predicts differently",
    )
    print(
        f"Saved {path}; the reloaded {type(loaded).__name__} predicts the same."
    )
    return loaded
