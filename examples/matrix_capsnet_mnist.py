"""Matrix capsules with EM routing on MNIST.

Trains the small network of Hinton, Sabour & Frosst, "Matrix capsules with
EM routing" (ICLR 2018, https://openreview.net/forum?id=HJWLfGWRb):
`keras_capsules.models.MatrixCapsNet.from_preset("small")`, whose capsules
are 4x4 pose matrices with an activation, routed by EM between three
capsule layers. `compile()` with no arguments supplies the spread loss on
the model's `spread_margin` variable (0.2, which learned fastest on MNIST)
and Adam with a cosine decay over the whole run, whose length it takes
from the first `fit` call (docs/em_routing.md gives the reasons). It
prints the test accuracy, saves `matrix_capsnet.keras`, loads it back and
checks that the loaded model predicts the same.

Without `--data-dir` it trains on the 5,000-image MNIST sample that ships
with the package (offline, no TensorFlow): one epoch reaches about 94 % on
its 1,000 test images, in a few minutes on a 2-core CPU. With `--data-dir`,
a folder holding the four original MNIST `.gz` files, it trains on all
60,000 digits; docs/results.md lists what longer runs reach. The smallNORB
benchmark of the paper is `matrix_capsnet_smallnorb.py`.

Usage:
    python examples/matrix_capsnet_mnist.py --epochs 1
    python examples/matrix_capsnet_mnist.py --data-dir path/to/mnist
    python examples/matrix_capsnet_mnist.py --smoke  # to check it runs

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
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument(
    "--output-dir", default=os.path.join("runs", "matrix_capsnet")
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
preset = "small"
if args.smoke:
    # The "tiny" preset still routes in every layer, in a fraction of a
    # second per step.
    args.epochs, args.batch_size, preset = 1, 16, "tiny"
    x_train, y_train = x_train[:32], y_train[:32]
    x_test, y_test = x_test[:16], y_test[:16]

"""
## The model

A 5x5 convolution, primary matrix capsules, two convolutional capsule
layers and one class capsule per digit; `predict` returns the class
capsules' activations.
"""

model = keras_capsules.models.MatrixCapsNet.from_preset(
    preset, input_shape=(28, 28, 1), num_classes=10
)
model.compile()
model.summary()

"""
## Training
"""

model.fit(
    x_train,
    y_train,
    batch_size=args.batch_size,
    epochs=args.epochs,
    shuffle=True,
    verbose=1,
)
metrics = model.evaluate(
    x_test, y_test, batch_size=args.batch_size, return_dict=True, verbose=0
)
print(f"Test accuracy: {metrics['accuracy']:.4f}")

"""
## Saving and loading

The `.keras` file keeps the optimizer's state and the spread margin. Its
learning rate has decayed to zero by the end of the run: to train the
loaded model further, compile it again (`compile(total_steps=...)`).
"""

os.makedirs(args.output_dir, exist_ok=True)
path = os.path.join(args.output_dir, "matrix_capsnet.keras")
model.save(path)
loaded = keras.models.load_model(path)
np.testing.assert_allclose(
    loaded.predict(x_test[:16], verbose=0),
    model.predict(x_test[:16], verbose=0),
    atol=1e-5,
)
print(f"Saved {path}; the loaded model predicts the same.")
