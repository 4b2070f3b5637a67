"""Capsule layers in your own model, on your own images.

Builds a small capsule network from `keras_capsules.layers` in the Keras
functional API (a convolution, `PrimaryCaps`, a routed `DenseCaps` layer
and `Length`, the length of each class capsule as its score), compiles it
with `MarginLoss` and XLA (`jit_compile=True` on TensorFlow and JAX), and
trains it on a folder of images with one subfolder per class, read by
`keras.utils.image_dataset_from_directory` (needs TensorFlow for
`tf.data`; `fit` takes the result on every backend). It prints the
validation accuracy, saves `custom_capsnet.keras`, loads it back and checks
that the loaded model predicts the same.

`--data-dir` is your folder, e.g. `flowers/daisy/*.jpg`, `flowers/rose/...`.
Without it the recipe writes the MNIST sample that ships with the package
as such a folder of PNG files (10 subfolders, 5,000 images, in
`--output-dir`) and trains on that, testing on the held-out fifth; an
epoch takes a few minutes on a 2-core CPU. `--smoke` writes a tiny
folder (4 images per class) and takes a few steps, to check that it runs.

For matrix capsules, swap the capsule layers for `PrimaryMatrixCaps`,
`EMConvCaps` and `EMClassCaps` (whose activations are the scores) and the
loss for `keras_capsules.losses.SpreadLoss`.

Usage:
    python examples/custom_images.py --data-dir path/to/images
    python examples/custom_images.py --epochs 3
    python examples/custom_images.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import os

import keras
import numpy as np

import keras_capsules
from keras_capsules import layers

IMAGE_SIZE = (28, 28)  # every image is resized to this
COLOR_MODE = "grayscale"  # or "rgb"

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--data-dir", help="Image folder, a subfolder a class.")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--output-dir", default=os.path.join("runs", "custom"))
parser.add_argument("--smoke", action="store_true", help="A tiny folder.")
args = parser.parse_args()
print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
keras.utils.set_random_seed(0)

"""
## A folder of images

Without `--data-dir`, the packaged MNIST sample becomes PNG files in
`<output-dir>/images/<digit>/`.
"""

if args.data_dir is None:
    args.data_dir = os.path.join(args.output_dir, "images")
    x, y = keras_capsules.datasets.mnist.load_sample("train")
    per_class = 4 if args.smoke else len(x)
    for label in range(10):
        folder = os.path.join(args.data_dir, str(label))
        os.makedirs(folder, exist_ok=True)
        for i in np.flatnonzero(y.argmax(-1) == label)[:per_class]:
            keras.utils.save_img(os.path.join(folder, f"{i}.png"), x[i])
if args.smoke:
    args.epochs, args.batch_size = 1, 16

train, validation = keras.utils.image_dataset_from_directory(
    args.data_dir,
    label_mode="categorical",
    color_mode=COLOR_MODE,
    image_size=IMAGE_SIZE,
    batch_size=args.batch_size,
    validation_split=0.2,
    subset="both",
    seed=0,
)
class_names = train.class_names
print(f"Classes: {class_names}")

"""
## The model, built from the capsule layers

`PrimaryCaps` turns feature maps into 8D capsules (one per type and
position); `DenseCaps` routes them by agreement into one 16D capsule per
class; `Length` scores each class by its capsule's length, in `[0, 1)`.
"""

channels = 1 if COLOR_MODE == "grayscale" else 3
inputs = keras.Input(shape=(*IMAGE_SIZE, channels))
x = keras.layers.Rescaling(1 / 255)(inputs)
x = keras.layers.Conv2D(64, 9, activation="relu")(x)
x = layers.PrimaryCaps(num_capsules=8, capsule_dim=8, kernel_size=9, strides=2)(
    x
)
x = layers.DenseCaps(num_capsules=len(class_names), capsule_dim=16)(x)
outputs = layers.Length()(x)
model = keras.Model(inputs, outputs, name="custom_capsnet")
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=keras_capsules.losses.MarginLoss(),
    metrics=["accuracy"],
    # XLA on TensorFlow and JAX; torch.compile would take minutes here.
    jit_compile=keras.backend.backend() != "torch",
)
model.summary()

"""
## Training
"""

model.fit(train, validation_data=validation, epochs=args.epochs, verbose=1)
metrics = model.evaluate(validation, return_dict=True, verbose=0)
print(f"Validation accuracy: {metrics['accuracy']:.4f}")

"""
## Saving and loading

Every capsule layer and loss is registered with Keras, so the file loads
with plain `keras.models.load_model`.
"""

os.makedirs(args.output_dir, exist_ok=True)
path = os.path.join(args.output_dir, "custom_capsnet.keras")
model.save(path)
loaded = keras.models.load_model(path)
images = np.asarray(next(iter(validation))[0])
np.testing.assert_allclose(
    loaded.predict(images, verbose=0),
    model.predict(images, verbose=0),
    atol=1e-5,
)
print(f"Saved {path}; the loaded model predicts the same.")
