"""Efficient-CapsNet on MNIST: self-attention routing in 160K parameters.

Trains `keras_capsules.models.EfficientCapsNet` (Mazzia, Salvetti &
Chiaberge, "Efficient-CapsNet: capsule network with self-attention
routing", Scientific Reports 2021,
https://doi.org/10.1038/s41598-021-93977-0) with the model's own
`compile()` defaults, the authors' settings: the margin loss plus 0.392 x
the mean squared reconstruction error, Adam at 5e-4 multiplied by 0.97
every epoch of 60,000 images at batch 16, down to 5e-5. It reports the
test accuracy after every epoch, saves `efficient_capsnet.keras`, loads it
back, checks that the loaded model predicts the same, and, when matplotlib
is installed, draws test digits above their reconstructions.

Without `--data-dir` it trains on the 5,000-image MNIST sample that ships
with the package (offline, no TensorFlow); an epoch of its 313 steps takes
a few minutes on a 2-core CPU (see docs/results.md). With `--data-dir`, a
folder holding the four original MNIST `.gz` files, it trains on all
60,000 digits; docs/results.md lists what longer runs reach.

Usage:
    python examples/efficient_capsnet_mnist.py --epochs 3
    python examples/efficient_capsnet_mnist.py --data-dir path/to/mnist
    python examples/efficient_capsnet_mnist.py --smoke  # to check it runs

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import os

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
keras.utils.set_random_seed(0)

"""
## The data

Images are float32 in `[0, 1]` with a channel axis, the labels one-hot.
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
    n = 2 * args.batch_size
    x_train, y_train = x_train[:n], y_train[:n]
    x_test, y_test = x_test[:16], y_test[:16]

"""
## The model

Depthwise primary capsules routed into the class capsules by
self-attention; `predict` returns the length of each class capsule.
"""

model = keras_capsules.models.EfficientCapsNet()
model.compile()
model.summary()

"""
## Training, with the test accuracy after every epoch
"""

model.fit(
    x_train,
    y_train,
    batch_size=args.batch_size,
    epochs=args.epochs,
    validation_data=(x_test, y_test),
    shuffle=True,
    verbose=1,
)
metrics = model.evaluate(x_test, y_test, return_dict=True, verbose=0)
print(f"Test accuracy: {metrics['accuracy']:.4f}")

"""
## Saving, loading and reconstructing
"""

os.makedirs(args.output_dir, exist_ok=True)
path = os.path.join(args.output_dir, "efficient_capsnet.keras")
model.save(path)
loaded = keras.models.load_model(path)
images = x_test[:8]
np.testing.assert_allclose(
    loaded.predict(images, verbose=0),
    model.predict(images, verbose=0),
    atol=1e-5,
)
print(f"Saved {path}; the loaded model predicts the same.")

try:
    from keras_capsules import visualization

    figure = visualization.reconstructions(images, loaded.reconstruct(images))
    figure.savefig(os.path.join(args.output_dir, "reconstructions.png"))
    print("Saved reconstructions.png.")
except ImportError:
    print("Install matplotlib to draw the reconstructions.")
