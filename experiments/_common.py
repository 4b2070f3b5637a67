"""Flags, data, callbacks and saving shared by the experiments.

Not a script: the experiments import it, as `python experiments/<name>.py`
puts this folder on `sys.path`. Every experiment spells its common flags
the same way (`add_common_arguments`): `--data-dir` (a folder with the four
original MNIST `.gz` files; the 5,000/1,000-image sample embedded in the
package without it), `--output-dir`, `--seed`, `--epochs`, `--batch-size`,
`--max-minutes`, `--backup-dir`, `--log-csv` and `--smoke`.

The training data of an experiment is a `SeededBatches`: batch `index` of
epoch `epoch` depends only on `(seed, epoch, index)`, and
`keras_capsules.callbacks.DatasetEpoch` tells it the epoch that `fit` is
in. A run interrupted and resumed with `--backup-dir`
(`keras.callbacks.BackupAndRestore`, which restarts at the epoch after the
last one saved) therefore trains on exactly the batches of an
uninterrupted run.
"""

import json
import os
import time

import keras
import numpy as np

import keras_capsules
from keras_capsules.datasets import mnist

SMOKE_STEPS = 2
SMOKE_BATCH_SIZE = 8


def add_common_arguments(parser, output_dir, epochs=None, batch_size=None):
    """Adds the flags every experiment spells the same way.

    Args:
        parser: The experiment's `argparse.ArgumentParser`.
        output_dir: The default of `--output-dir`.
        epochs: The default of `--epochs`, or `None` for an experiment
            that does not train (then no training flags are added).
        batch_size: The default of `--batch-size`.
    """
    parser.add_argument(
        "--data-dir",
        default=None,
        help="Folder with the four original MNIST .gz files (default: the "
        "5,000/1,000-image sample embedded in the package).",
    )
    parser.add_argument("--output-dir", default=output_dir)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    if epochs is not None:
        parser.add_argument("--epochs", type=int, default=epochs)
        parser.add_argument(
            "--max-minutes",
            type=float,
            default=None,
            help="Stop training after this many minutes, at the end of a "
            "step (a run stopped so is finished).",
        )
        parser.add_argument(
            "--backup-dir",
            default=None,
            help="Back up the training state here after every epoch and "
            "resume from it when the run is started again with the same "
            "flags (keras.callbacks.BackupAndRestore); the resumed run "
            "draws the data of the epochs it has left.",
        )
        parser.add_argument(
            "--log-csv",
            default=None,
            help="Append every epoch's logs to this CSV file.",
        )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="A few steps of a small network on the embedded sample, to "
        "check that everything runs.",
    )


def load_digits(args):
    """The MNIST `(train, test)` pairs of `(uint8 images, int labels)`: the
    files of `--data-dir`, or the embedded sample."""
    splits = []
    for split in ("train", "test"):
        if args.data_dir:
            images, labels = mnist.load_arrays(split, manual_dir=args.data_dir)
        else:
            x, y = mnist.load_sample(split)
            images = np.rint(x[..., 0] * 255).astype("uint8")
            labels = y.argmax(-1)
        splits.append((images, labels.astype("int64")))
    return splits


def one_hot(labels):
    """Integer labels as float32 one-hot rows of `mnist.NUM_CLASSES`."""
    return np.eye(mnist.NUM_CLASSES, dtype="float32")[labels]


def as_inputs(images):
    """uint8 `(N, H, W)` images as float32 `(N, H, W, 1)` in `[0, 1]`."""
    return (images.astype("float32") / np.float32(255.0))[..., None]


def batch_seed(seed, epoch, index):
    """The seed of batch `index` of epoch `epoch`, an int below 2**32."""
    sequence = np.random.SeedSequence((seed, epoch, index))
    return int(sequence.generate_state(1)[0])


def epoch_order(seed, epoch, size):
    """The order of `size` examples in epoch `epoch`."""
    return np.random.default_rng((seed, epoch)).permutation(size)


class SeededBatches(keras.utils.PyDataset):
    """`num_batches` batches of `make_batch(epoch, index)`.

    `make_batch` must depend only on its arguments (and the seed it
    closes over), so that every batch is reproducible; `epoch` is set by
    a `keras_capsules.callbacks.DatasetEpoch` callback (`run_callbacks`
    adds it). Pass both to `fit` with `shuffle=False`: Keras would otherwise
    shuffle the batches with Python's global random state, which a
    resumed run does not restore.

    With `num_processes > 1`, process `process_id` takes its slice of
    every batch (`keras.distribution.DataParallel(auto_shard_dataset=
    False)`): the slices of all processes make up the single-process
    stream. Every batch must then split evenly over the processes.
    """

    def __init__(
        self, num_batches, make_batch, num_processes=1, process_id=0, **kwargs
    ):
        super().__init__(**kwargs)
        self.num_batches_per_epoch = num_batches
        self.make_batch = make_batch
        self.num_processes = num_processes
        self.process_id = process_id
        self.epoch = 0

    def __len__(self):
        return self.num_batches_per_epoch

    def __getitem__(self, index):
        batch = self.make_batch(self.epoch, index)
        if self.num_processes == 1:
            return batch
        rows = len(batch[0])
        if rows % self.num_processes:
            raise ValueError(
                f"Batch {index} holds {rows} examples, which do not split "
                f"evenly over {self.num_processes} processes."
            )
        share = rows // self.num_processes
        chosen = slice(self.process_id * share, (self.process_id + 1) * share)
        return tuple(part[chosen] for part in batch)


def transformed_digits(images, labels, batch_size, seed, transform):
    """Batches of `transform(images, seed)` with one-hot labels.

    Every epoch shuffles the digits (order from `(seed, epoch)`) and draws
    a new seed per batch (from `(seed, epoch, index)`).
    """
    y = one_hot(labels)

    def make_batch(epoch, index):
        chosen = epoch_order(seed, epoch, len(images))[
            index * batch_size : (index + 1) * batch_size
        ]
        x = transform(images[chosen], batch_seed(seed, epoch, index))
        return as_inputs(x), y[chosen]

    return SeededBatches(-(-len(images) // batch_size), make_batch)


class TimeLimit(keras.callbacks.Callback):
    """Stops training once `minutes` have passed (never with `None`);
    `stopped` says whether it did."""

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


def run_callbacks(args, data, *callbacks):
    """`callbacks`, then those of `--backup-dir` and `--log-csv`, then the
    one that tells `data` its epoch."""
    callbacks = list(callbacks)
    if args.backup_dir:
        callbacks.append(keras.callbacks.BackupAndRestore(args.backup_dir))
    if args.log_csv:
        callbacks.append(keras.callbacks.CSVLogger(args.log_csv, append=True))
    return callbacks + [keras_capsules.callbacks.DatasetEpoch(data)]


# The names of `small_model` and `paper_model`.
MODEL_FAMILIES = (
    "capsnet",
    "efficient_capsnet",
    "matrix_capsnet",
    "stacked_capsule_autoencoder",
)


def small_model(name):
    """The smallest network of a model family, uncompiled, for 28x28
    MNIST digits: CapsNet with 16 filters and 4 capsules of 4 dimensions
    and two routing iterations, EfficientCapsNet's MNIST network (160K
    parameters), MatrixCapsNet's `tiny` preset with one iteration, and a
    Stacked Capsule Autoencoder of 4 parts with 5x5 templates and 3 object
    capsules of 8 dimensions (seed 0, its training noise included).

    For checks and smoke runs: each step takes a fraction of a second on a
    CPU, and all of them still route (CapsNet by agreement over 144
    primary capsules, EfficientCapsNet by self-attention, MatrixCapsNet by
    EM in three layers, the autoencoder's object capsules by a Set
    Transformer over its parts)."""
    models = keras_capsules.models
    if name == "capsnet":
        return models.CapsNet(
            image_shape=mnist.IMAGE_SHAPE,
            num_classes=mnist.NUM_CLASSES,
            conv_filters=16,
            num_primary_capsules=4,
            primary_capsule_dim=4,
            capsule_dim=4,
            routing_iterations=2,
            decoder_units=(16,),
        )
    if name == "efficient_capsnet":
        return models.EfficientCapsNet.from_preset("mnist")
    if name == "matrix_capsnet":
        return models.MatrixCapsNet.from_preset(
            "tiny",
            image_shape=mnist.IMAGE_SHAPE,
            num_classes=mnist.NUM_CLASSES,
            routing_iterations=1,
        )
    if name == "stacked_capsule_autoencoder":
        return models.StackedCapsuleAutoencoder(
            image_shape=mnist.IMAGE_SHAPE,
            num_classes=mnist.NUM_CLASSES,
            num_parts=4,
            num_object_capsules=3,
            template_size=(5, 5),
            num_part_features=2,
            object_capsule_dim=8,
            seed=0,
        )
    raise ValueError(
        f"Expected a model among {MODEL_FAMILIES}. Received: name={name!r}"
    )


def paper_model(name):
    """The paper's network of a model family, uncompiled, for 28x28 MNIST
    digits: CapsNet's 8.2M parameters, EfficientCapsNet's MNIST network
    and MatrixCapsNet's A=B=C=D=32; the Stacked Capsule Autoencoder's is
    the official MNIST network (`"scae_mnist"`), for digits on 40x40
    canvases."""
    models = keras_capsules.models
    if name == "capsnet":
        return models.CapsNet(
            image_shape=mnist.IMAGE_SHAPE, num_classes=mnist.NUM_CLASSES
        )
    if name == "efficient_capsnet":
        return models.EfficientCapsNet.from_preset("mnist")
    if name == "matrix_capsnet":
        return models.MatrixCapsNet.from_preset(
            "full",
            image_shape=mnist.IMAGE_SHAPE,
            num_classes=mnist.NUM_CLASSES,
        )
    if name == "stacked_capsule_autoencoder":
        return models.StackedCapsuleAutoencoder.from_preset("scae_mnist")
    raise ValueError(
        f"Expected a model among {MODEL_FAMILIES}. Received: name={name!r}"
    )


def sabour_cnn(input_shape, num_classes=10, num_labels=1, pool=True):
    """The baseline CNN of Sabour et al. (2017), section 5, compiled.

    Three 5x5 convolutions of 256, 256 and 128 ReLU channels ("same"
    padding), dense layers of 328 and 192 ReLU units, dropout and a softmax
    (one label) or one sigmoid per class (`num_labels > 1`, MultiMNIST).
    Without pooling the network has the paper's 35.4M parameters at 28x28;
    `pool=True` adds a 2x2 max-pooling after the first two convolutions,
    which keeps it near CapsNet's cost per image on larger canvases. Adam
    at 1e-3 decayed by 0.96 every 2000 steps; the metric is `"accuracy"`
    (with `num_labels > 1`: all labels among the top scores).
    """
    layers = [keras.Input(shape=input_shape)]
    for i, filters in enumerate((256, 256, 128)):
        layers.append(
            keras.layers.Conv2D(filters, 5, padding="same", activation="relu")
        )
        if pool and i < 2:
            layers.append(keras.layers.MaxPooling2D(2))
    layers += [
        keras.layers.Flatten(),
        keras.layers.Dense(328, activation="relu"),
        keras.layers.Dense(192, activation="relu"),
        keras.layers.Dropout(0.5),
    ]
    if num_labels == 1:
        layers.append(keras.layers.Dense(num_classes, activation="softmax"))
        loss = "categorical_crossentropy"
        metric = keras.metrics.CategoricalAccuracy(name="accuracy")
    else:
        layers.append(keras.layers.Dense(num_classes, activation="sigmoid"))
        loss = "binary_crossentropy"
        metric = keras_capsules.metrics.TopKExactMatch(
            num_labels, name="accuracy"
        )
    model = keras.Sequential(layers, name="baseline_cnn")
    model.compile(
        optimizer=keras.optimizers.Adam(
            learning_rate=keras.optimizers.schedules.ExponentialDecay(
                1e-3, decay_steps=2000, decay_rate=0.96
            )
        ),
        loss=loss,
        metrics=[metric],
        jit_compile=keras.backend.backend() != "torch",
    )
    return model


def warmup_cosine(peak, total_steps, warmup_steps=0, floor=0.0, start=0.0):
    """A learning rate that goes linearly from `start` to `peak` over
    `warmup_steps` (`start=peak` holds the peak), then along a cosine to
    `floor` times the peak over the rest of `total_steps` (`floor=1`:
    constant)."""
    return keras.optimizers.schedules.CosineDecay(
        start,
        max(1, total_steps - warmup_steps),
        alpha=floor,
        warmup_target=peak,
        warmup_steps=warmup_steps,
    )


@keras.saving.register_keras_serializable(package="experiments")
class WarmupHoldCosine(keras.optimizers.schedules.LearningRateSchedule):
    """A learning rate that goes linearly from 0 to `peak` over
    `warmup_steps`, holds `peak` until step `decay_from`, then follows a
    cosine to `floor` times the peak at `total_steps` (and stays there):
    the rates of `warmup_cosine(peak, decay_from, warmup_steps, floor=1)`
    then of `warmup_cosine(peak, total_steps, decay_from, floor,
    start=peak)`, in one schedule that a saved optimizer keeps."""

    def __init__(self, peak, total_steps, warmup_steps, decay_from, floor):
        self.peak, self.total_steps = peak, total_steps
        self.warmup_steps, self.decay_from = warmup_steps, decay_from
        self.floor = floor

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warm = self.peak * (step / max(1, self.warmup_steps))
        decay_steps = max(1, self.total_steps - self.decay_from)
        fraction = keras.ops.clip((step - self.decay_from) / decay_steps, 0, 1)
        cosine = 0.5 * (1.0 + keras.ops.cos(np.pi * fraction))
        decayed = self.peak * ((1 - self.floor) * cosine + self.floor)
        held = keras.ops.where(step < self.decay_from, self.peak, decayed)
        return keras.ops.where(step < self.warmup_steps, warm, held)

    def get_config(self):
        return {
            "peak": self.peak,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay_from": self.decay_from,
            "floor": self.floor,
        }


def official_matrix_optimizer():
    """Adam with the official EM code's schedule: 0.01 decayed continuously
    by 0.96 every 20,000 steps, `epsilon=1e-8`."""
    return keras.optimizers.Adam(
        keras.optimizers.schedules.ExponentialDecay(
            0.01, decay_steps=20000, decay_rate=0.96
        ),
        epsilon=1e-8,
    )


def save_and_reload(model, path, images):
    """Saves `model` as `.keras`, reloads it and checks its predictions on
    `images`; returns the reloaded model."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded.predict(images, verbose=0)),
        keras.ops.convert_to_numpy(model.predict(images, verbose=0)),
        atol=1e-5,
        err_msg="the reloaded model predicts differently",
    )
    print(f"Saved {path}; the reloaded model predicts the same.")
    return loaded


def load_model(source):
    """A model from a saved `.keras` file, a preset directory, or the name
    of a trained preset shipped with the package."""
    if os.path.isfile(source):
        return keras.models.load_model(source)
    return keras_capsules.models.from_preset(source)


def append_jsonl(path, record):
    """Appends `record` to the JSON-lines file `path` as one line."""
    with open(path, "a") as file:
        file.write(json.dumps(record) + "\n")


def write_results(results, output_dir):
    """Writes `results` to `results.json` in `output_dir` and prints it."""
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "results.json"), "w") as file:
        json.dump(results, file, indent=1)
    print(json.dumps(results, indent=1))
