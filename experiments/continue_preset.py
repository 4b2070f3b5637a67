"""Continue training a trained MNIST preset with a schedule of its own.

A trained preset's weights are trained further on the recipe's data: the
last twelfth of the MNIST training split is held out to validate each
epoch, the rest is shifted by up to 2 pixels
(`keras_capsules.datasets.mnist.ShiftedDigits`), and the model's own
`compile(total_steps=...)` gives the schedule over the new run (for CapsNet,
Adam at 1e-3 held for 80 % of the run, then a cosine to zero; a fresh
optimizer state), or with `--learning-rate`, Adam with a cosine from that
rate to zero over the run. With `--keep-best` the weights kept are those of
the epoch with the best validation accuracy (the starting preset's own
included: if no epoch beats it, the preset comes out unchanged). The test
split is scored once, at the end, and the network is saved as a preset
whose metadata records both runs: the one that trained the starting preset
and this one.

This is how the shipped `capsnet_mnist` preset was made from the 7 epochs
of `examples/capsnet_mnist.py` under the official decay, which leaves the
learning rate near its start: twice, the two commands of the usage below
(docs/presets.md).

Usage:
    python experiments/continue_preset.py --preset capsnet_mnist \\
        --data-dir data/mnist --epochs 3 --seed 1
    python experiments/continue_preset.py --preset capsnet_mnist \\
        --data-dir data/mnist --epochs 3 --seed 2 --learning-rate 3e-4 \\
        --keep-best
    # Check that everything runs (a few steps on the embedded sample).
    python experiments/continue_preset.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import os
import sys
import time

import _common
import keras
import numpy as np

import keras_capsules
from keras_capsules.datasets import mnist

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument(
    "--preset",
    default="capsnet_mnist",
    help="The trained preset to start from: a name in "
    "keras_capsules.models.list_presets() or a preset directory.",
)
parser.add_argument(
    "--learning-rate",
    type=float,
    default=None,
    help="Train with Adam and a cosine from this rate to zero over the run "
    "(default: the model's own compile(total_steps=...)).",
)
parser.add_argument(
    "--keep-best",
    action="store_true",
    help="Keep the weights of the epoch with the best validation accuracy, "
    "or the starting preset's if no epoch beats it (default: the last "
    "epoch's).",
)
_common.add_common_arguments(
    parser, os.path.join("runs", "continue_preset"), epochs=3, batch_size=128
)
args = parser.parse_args()
print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
keras.utils.set_random_seed(args.seed)

(train_images, train_labels), (test_images, test_labels) = _common.load_digits(
    args
)
x_train, y_train = (
    _common.as_inputs(train_images),
    _common.one_hot(train_labels),
)
x_test, y_test = _common.as_inputs(test_images), _common.one_hot(test_labels)
if args.smoke:
    args.epochs, args.batch_size = 1, _common.SMOKE_BATCH_SIZE
    x_train, y_train = x_train[:34], y_train[:34]
    x_test, y_test = x_test[:16], y_test[:16]
num_validation = len(x_train) // 12
x_val, y_val = x_train[-num_validation:], y_train[-num_validation:]
x_train, y_train = x_train[:-num_validation], y_train[:-num_validation]

model = keras_capsules.models.from_preset(args.preset)
before = keras_capsules.models.from_preset(args.preset)
before.compile()
start_accuracy = before.evaluate(x_val, y_val, return_dict=True, verbose=0)
print(f"Validation accuracy of the preset: {start_accuracy['accuracy']:.4f}")
train = mnist.ShiftedDigits(x_train, y_train, args.batch_size, seed=args.seed)
total_steps = args.epochs * len(train)
if args.learning_rate is None:
    model.compile(total_steps=total_steps)
else:
    model.compile(
        optimizer=keras.optimizers.Adam(
            _common.warmup_cosine(args.learning_rate, total_steps)
        )
    )
callbacks = [_common.TimeLimit(args.max_minutes)]
if args.keep_best:
    # Never stops early; restores the best epoch's weights at the end.
    callbacks.append(
        keras.callbacks.EarlyStopping(
            monitor="val_accuracy",
            mode="max",
            patience=args.epochs,
            restore_best_weights=True,
        )
    )

start = time.time()
history = model.fit(
    train,
    epochs=args.epochs,
    validation_data=(x_val, y_val),
    callbacks=_common.run_callbacks(args, train, *callbacks),
    shuffle=False,
    verbose=1,
)
minutes = (time.time() - start) / 60
validation = history.history["val_accuracy"]
epochs_kept = len(validation)
if args.keep_best:
    epochs_kept = 1 + int(np.argmax(validation))
    if validation[epochs_kept - 1] <= start_accuracy["accuracy"]:
        epochs_kept = 0
        model.set_weights(before.get_weights())
    print(f"Keeping the weights after epoch {epochs_kept} of this run.")
metrics = model.evaluate(x_test, y_test, return_dict=True, verbose=0)
print(f"Test accuracy: {metrics['accuracy']:.4f}")

source = keras_capsules.models.list_presets().get(args.preset, {})
path = os.path.join(args.output_dir, "preset")
model.save_to_preset(
    path,
    weights_dtype="float16",
    metadata={
        "dataset": "mnist" if args.data_dir else "mnist sample",
        "images": dict(train=len(x_train), val=len(x_val), test=len(x_test)),
        "test_accuracy": round(float(metrics["accuracy"]), 4),
        "validation_accuracy": [round(start_accuracy["accuracy"], 4)]
        + [round(v, 4) for v in validation],
        "epochs_kept": epochs_kept,
        "images_seen": source.get("images_seen", 0)
        + epochs_kept * len(x_train),
        "seed": args.seed,
        "training_minutes": round(
            source.get("training_minutes", 0.0) + minutes, 1
        ),
        "pixel_range": [0.0, 1.0],
        "command": " && ".join(
            [source["command"]] * ("command" in source)
            + [
                " ".join(
                    [f"KERAS_BACKEND={keras.backend.backend()} python"]
                    + sys.argv
                )
            ]
        ),
    },
)
loaded = keras_capsules.models.from_preset(path)
# The preset stores float16 weights: its scores differ by float16 rounding.
np.testing.assert_allclose(
    loaded.predict(x_test[:16], verbose=0),
    model.predict(x_test[:16], verbose=0),
    atol=1e-3,
)
print(f"Saved the preset {path}; the loaded model predicts the same.")
