"""Efficient-CapsNet on MNIST: self-attention routing in 160K parameters.

Trains `keras_capsules.models.EfficientCapsNet` (Mazzia, Salvetti &
Chiaberge, Scientific Reports 2021,
https://doi.org/10.1038/s41598-021-93977-0) with the model's own
`compile()` defaults, the authors' settings: the margin loss plus 0.392 x
the mean squared reconstruction error, Adam at 5e-4 multiplied by 0.97
every epoch of 60,000 images at batch 16, down to 5e-5; digits shifted by
up to 2 pixels. A twelfth of the training split is held out to validate
each epoch; the test split is scored once, at the end. The network is
saved as a preset (config, weights, and metadata with the test accuracy and
this command) and loaded back with `from_preset`; with matplotlib, test
digits are drawn above their reconstructions.

Without `--data-dir` it trains on the 5,000-image MNIST sample shipped with
the package (offline), an epoch in a few minutes on a 2-core CPU. With
`--data-dir`, a folder holding the four original MNIST `.gz` files, it
trains on 55,000 of the 60,000 training digits and validates on the other
5,000 (docs/presets.md).

On JAX, several processes or hosts train as one job: start it once per
process with the `KERAS_DISTRIBUTION_*` variables (docs/data_parallel.md);
each feeds its share of every batch, and process 0 alone reports and saves.

Usage:
    python examples/efficient_capsnet_mnist.py --epochs 3
    python examples/efficient_capsnet_mnist.py --data-dir path/to/mnist
    python examples/efficient_capsnet_mnist.py --smoke  # to check it runs
    (set the backend with `KERAS_BACKEND=jax|tensorflow|torch`)
"""

import argparse
import os
import sys
import time

import keras
import numpy as np

import keras_capsules
from keras_capsules.datasets import mnist

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--data-dir", help="Folder with the MNIST .gz files.")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument(
    "--output-dir", default=os.path.join("runs", "efficient_capsnet")
)
parser.add_argument("--smoke", action="store_true", help="Two tiny steps.")
args = parser.parse_args()
print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")

"""
## Several processes: one job on Keras's distribution engine (JAX)
"""

num_processes = int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", 1))
process_id = int(os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", 0))
share = dict(num_processes=num_processes, process_id=process_id)
if num_processes > 1:
    share["drop_remainder"] = True  # so every batch splits over all devices
    # Before any array exists; every process feeds its own share (below).
    keras.distribution.initialize()
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(auto_shard_dataset=False)
    )
keras.utils.set_random_seed(0)

"""
## The data: float32 images in `[0, 1]` with a channel axis, one-hot labels
"""


def load_mnist(split):
    if args.data_dir is None:
        return mnist.load_sample(split)
    images, labels = mnist.load_arrays(split, manual_dir=args.data_dir)
    x = images[..., None].astype("float32") / 255.0
    return x, keras.utils.to_categorical(labels, mnist.NUM_CLASSES)


x_train, y_train = load_mnist("train")
x_test, y_test = load_mnist("test")
if args.smoke:
    args.epochs = 1
    n = 2 * args.batch_size + 8
    x_train, y_train = x_train[:n], y_train[:n]
    x_test, y_test = x_test[:16], y_test[:16]
num_validation = len(x_train) // 12
x_val, y_val = x_train[-num_validation:], y_train[-num_validation:]
x_train, y_train = x_train[:-num_validation], y_train[:-num_validation]

"""
## The model: depthwise primary capsules routed by self-attention
"""

model = keras_capsules.models.EfficientCapsNet()
# batch_size is that of all processes together.
train = mnist.ShiftedDigits(x_train, y_train, args.batch_size, **share)
model.compile(total_steps=args.epochs * len(train))
if process_id == 0:
    model.summary()

"""
## Training, validated after every epoch, tested once at the end
"""

start = time.time()
model.fit(
    train,
    epochs=args.epochs,
    # Every process validates on all of x_val: the metrics are exact.
    validation_data=(x_val, y_val),
    shuffle=False,  # ShiftedDigits shuffles itself, from its seed
    verbose=1 if process_id == 0 else 0,
)
minutes = (time.time() - start) / 60
metrics = model.evaluate(x_test, y_test, return_dict=True, verbose=0)
if process_id > 0:
    sys.exit()  # process 0 reports and saves
keras.distribution.set_distribution(None)  # what follows runs here alone
print(f"Test accuracy: {metrics['accuracy']:.4f}")

"""
## Saving as a preset, loading and reconstructing
"""

path = os.path.join(args.output_dir, "preset")
model.save_to_preset(
    path,
    metadata={
        "dataset": "mnist" if args.data_dir else "mnist sample",
        "images": dict(train=len(x_train), val=len(x_val), test=len(x_test)),
        "test_accuracy": round(float(metrics["accuracy"]), 4),
        "images_seen": args.epochs
        * min(len(x_train), len(train) * args.batch_size),
        "seed": 0,
        "processes": num_processes,
        "training_minutes": round(minutes, 1),
        "pixel_range": [0.0, 1.0],
        "command": " ".join(
            [f"KERAS_BACKEND={keras.backend.backend()} python"] + sys.argv
        ),
    },
)
loaded = keras_capsules.models.EfficientCapsNet.from_preset(path)
for saved, trained in zip(loaded.get_weights(), model.get_weights()):
    np.testing.assert_array_equal(saved, trained)
print(f"Saved the preset {path}; it loads with the trained weights.")

try:
    from keras_capsules import visualization

    images = x_test[:8]
    figure = visualization.reconstructions(images, loaded.reconstruct(images))
    figure.savefig(os.path.join(args.output_dir, "reconstructions.png"))
    print("Saved reconstructions.png.")
except ImportError:
    print("Install matplotlib to draw the reconstructions.")
