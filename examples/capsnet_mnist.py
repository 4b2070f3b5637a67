"""CapsNet on MNIST: dynamic routing between capsules.

Trains the three-layer CapsNet of Sabour, Frosst & Hinton, "Dynamic Routing
Between Capsules" (NeurIPS 2017, https://arxiv.org/abs/1710.09829) with the
model's own `compile()` defaults: the paper's margin loss plus 0.0005 x the
reconstruction loss and 3 routing iterations, and Adam at the paper's 1e-3,
held for the first 80 % of the run and decayed to zero by a cosine over the
last 20 % (`compile(total_steps=...)`); digits shifted by up to 2 pixels
(the paper's augmentation). A twelfth of the training split is held out to
validate each epoch; the test split is scored once, at the end. The network
is saved as a preset (config, weights, and metadata with the test accuracy
and this command), loaded back with `from_preset` and checked to predict
the same.

Without `--data-dir` it trains on the 5,000-image MNIST sample that ships with
the package (offline, as NumPy arrays) and tests on its 1,000 test images: two
epochs take under 4 minutes on a 2-core CPU (TensorFlow + XLA;
docs/results.md gives the accuracy). With `--data-dir`, a folder holding the
four original MNIST `.gz` files, it trains on 55,000 of the 60,000 training
digits and validates on the other 5,000 (about 13 minutes an epoch on that
CPU with TensorFlow + XLA, minutes on a GPU; docs/presets.md).

Usage:
    python examples/capsnet_mnist.py --epochs 2 --output-dir runs/quickstart
    python examples/capsnet_mnist.py --data-dir path/to/mnist --epochs 10
    python examples/capsnet_mnist.py --smoke  # a few steps, to check it runs
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
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--output-dir", default=os.path.join("runs", "capsnet"))
parser.add_argument("--smoke", action="store_true", help="Two tiny steps.")
args = parser.parse_args()
print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
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
    args.epochs, args.batch_size = 1, 16
    x_train, y_train = x_train[:34], y_train[:34]
    x_test, y_test = x_test[:16], y_test[:16]
num_validation = len(x_train) // 12
x_val, y_val = x_train[-num_validation:], y_train[-num_validation:]
x_train, y_train = x_train[:-num_validation], y_train[:-num_validation]

"""
## The model

`CapsNet` maps images to the length of each class capsule, a score in
`[0, 1)`; its decoder and reconstruction loss are part of the model.
`compile()` supplies the paper's loss and Adam; `total_steps` sizes its
learning-rate schedule to the run.
"""

model = keras_capsules.models.CapsNet(image_shape=(28, 28, 1), num_classes=10)
train = mnist.ShiftedDigits(x_train, y_train, args.batch_size, seed=0)
model.compile(total_steps=args.epochs * len(train))
model.summary()

"""
## Training, validated after every epoch, tested once at the end
"""

start = time.time()
model.fit(
    train,
    epochs=args.epochs,
    validation_data=(x_val, y_val),
    verbose=1,
)
minutes = (time.time() - start) / 60
metrics = model.evaluate(x_test, y_test, return_dict=True, verbose=0)
print(f"Test accuracy: {metrics['accuracy']:.4f}")

"""
## Saving as a preset and loading it back
"""

path = os.path.join(args.output_dir, "preset")
model.save_to_preset(
    path,
    metadata={
        "dataset": "mnist" if args.data_dir else "mnist sample",
        "images": dict(train=len(x_train), val=len(x_val), test=len(x_test)),
        "test_accuracy": round(float(metrics["accuracy"]), 4),
        "images_seen": args.epochs * len(x_train),
        "seed": 0,
        "training_minutes": round(minutes, 1),
        "pixel_range": [0.0, 1.0],
        "command": " ".join(
            [f"KERAS_BACKEND={keras.backend.backend()} python"] + sys.argv
        ),
    },
)
loaded = keras_capsules.models.CapsNet.from_preset(path)
np.testing.assert_allclose(
    loaded.predict(x_test[:16], verbose=0),
    model.predict(x_test[:16], verbose=0),
    atol=1e-5,
)
print(f"Saved the preset {path}; the loaded model predicts the same.")
