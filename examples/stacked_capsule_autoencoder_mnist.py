"""Stacked Capsule Autoencoders on MNIST: capsules learned without labels.

Trains `keras_capsules.models.StackedCapsuleAutoencoder` (Kosiorek et al.,
NeurIPS 2019, https://arxiv.org/abs/1906.06818) with its `compile()`
defaults on digits placed at random on a 40x40 canvas, as the official
pipeline places them: the official MNIST configuration, or with
`--from-preset scae_mnist_fast` the fast one (presence masking "log",
presence noise of width 1, RMSprop at 3e-4 after a 100-step warm-up).
Labels train only two linear probes, held out of the gradient.

After every epoch the test digits (canvases drawn once) are scored by the
probes and by k-means (10 clusters, Hungarian matching, fitted on the test
features as the official evaluation does) on the object presences (prior)
and the part mass each object explains (posterior), with the deterministic
`predict`; at the end also with the official noisy evaluation
(`official_*`) and k-means fitted on training features (`*_strict`); the
curve to `curve.csv`, the network to a preset. It trains on the package's
MNIST sample, or with `--data-dir` (the MNIST `.gz` files) on the 60,000
training digits and scores the 10,000 test digits (the paper: 300,000
steps).

Usage:
    python examples/stacked_capsule_autoencoder_mnist.py --data-dir mnist
    python examples/stacked_capsule_autoencoder_mnist.py --data-dir mnist \
        --from-preset scae_mnist_fast --epochs 11
    python examples/stacked_capsule_autoencoder_mnist.py --smoke
    (`KERAS_BACKEND=jax|tensorflow|torch`; k-means needs scikit-learn, SciPy)
"""

import argparse
import os
import sys
import time

import keras
import numpy as np

import keras_capsules
from keras_capsules import metrics
from keras_capsules.datasets import mnist

SCAE = keras_capsules.models.StackedCapsuleAutoencoder
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--data-dir", help="Folder with the MNIST .gz files.")
parser.add_argument("--from-preset", default="scae_mnist", choices=SCAE.presets)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--output-dir", default=os.path.join("runs", "scae"))
parser.add_argument("--smoke", action="store_true", help="Two tiny steps.")
args = parser.parse_args()
print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
keras.utils.set_random_seed(0)
os.makedirs(args.output_dir, exist_ok=True)

"""
## The data: uint8 digits on a 40x40 canvas, integer labels
"""


def load_mnist(split):
    if args.data_dir is None:
        x, y = mnist.load_sample(split)
        return (x * 255).round().astype("uint8"), y.argmax(-1)
    images, labels = mnist.load_arrays(split, manual_dir=args.data_dir)
    return images[..., None], labels.astype("int32")


x_train, y_train = load_mnist("train")
x_test, y_test = load_mnist("test")
if args.smoke:
    args.epochs, args.batch_size = 1, 8
    x_train, y_train = x_train[:16], y_train[:16]
    x_test, y_test = x_test[:20], y_test[:20]
# Full batches only, as the official pipeline; the test canvases drawn once.
train = mnist.PaddedDigits(
    x_train, y_train, batch_size=args.batch_size, drop_remainder=True
)
test = mnist.PaddedDigits(x_test, batch_size=len(x_test), shuffle=False)[0]
# Training digits for the strict protocol's k-means (10,000 at most).
fit_images = mnist.PaddedDigits(x_train[:10000], batch_size=10000, seed=1)[0]

"""
## The model: part capsules, object capsules, the configuration's optimizer
"""

model = SCAE.from_preset(args.from_preset)
model.compile()
model.summary()

"""
## Scoring the object capsules after every epoch
"""


def score(scored=model, strict=False, prefix=""):
    out = scored.predict(test, batch_size=500, verbose=0)
    fit = strict and scored.predict(fit_images, batch_size=500, verbose=0)
    result = {}
    for kind, name in (
        ("prior", "object_presence"),
        ("posterior", "object_posterior_presence"),
    ):
        key, logits = prefix + kind, out[f"{kind}_logits"]
        result[f"{key}_probe"] = float(np.mean(logits.argmax(-1) == y_test))
        result[f"{key}_kmeans"] = metrics.kmeans_accuracy(out[name], y_test)
        if strict:
            result[f"{key}_kmeans_strict"] = metrics.kmeans_accuracy(
                out[name], y_test, fit_features=fit[name]
            )
    return result


class Score(keras.callbacks.Callback):
    """Adds the test scores to the epoch's logs (and so to the CSV)."""

    def on_epoch_end(self, epoch, logs=None):
        logs.update(score(), steps=(epoch + 1) * len(train))
        logs["minutes"] = (time.time() - start) / 60


"""
## Training: `fit` on images and labels (the labels reach only the probes)
"""

start = time.time()
curve = keras.callbacks.CSVLogger(os.path.join(args.output_dir, "curve.csv"))
model.fit(train, epochs=args.epochs, shuffle=False, callbacks=[Score(), curve])
minutes = (time.time() - start) / 60
final = score(strict=True)
official = SCAE.from_config({**model.get_config(), "inference_noise_seed": 0})
official.set_weights(model.get_weights())
final.update(score(official, prefix="official_"))
for key, value in final.items():
    print(f"{key}: {value:.4f}")

"""
## Saving as a preset and loading it back
"""

path = os.path.join(args.output_dir, "preset")
model.save_to_preset(
    path,
    metadata={
        "dataset": "mnist" if args.data_dir else "mnist sample",
        "images": dict(train=len(x_train), test=len(x_test)),
        "steps": args.epochs * len(train),
        "batch_size": args.batch_size,
        **{key: round(value, 4) for key, value in final.items()},
        "seed": 0,
        "training_minutes": round(minutes, 1),
        "pixel_range": [0.0, 1.0],
        "command": " ".join(
            [f"KERAS_BACKEND={keras.backend.backend()} python"] + sys.argv
        ),
    },
)
loaded = keras_capsules.models.from_preset(path)
for saved, trained in zip(loaded.get_weights(), model.get_weights()):
    np.testing.assert_array_equal(saved, trained)
print(f"Saved the preset {path}; it loads with the trained weights.")
