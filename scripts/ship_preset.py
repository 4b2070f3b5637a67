"""Ships a trained preset directory in the package.

Copies a preset that a recipe wrote (`<output-dir>/preset`) into
`keras_capsules/presets/<name>/`, storing its weights in `--weights-dtype`,
and measures the stored weights rather than assuming them:

- on all 10,000 MNIST test images when `--data-dir` is given (recorded as
  `test_accuracy`; the accuracy of the trained float32 weights that the
  recipe measured is kept as `trained_test_accuracy`),
- on the 1,000 test images of the embedded sample (`sample_test_accuracy`,
  the figure CI checks on every backend),
- and writes the predictions (class-capsule lengths or activations) of
  the first 32 sample test images to `tests/models/preset_predictions.npz`,
  which CI compares on every backend.

A classifier's accuracy is that of its predicted classes. A Stacked
Capsule Autoencoder, trained without labels, is scored as
`experiments/scae_variants.py` scores it: the digits placed on its canvas
by `mnist.PaddedDigits` (fixed offsets), k-means on the posterior object
presences of its deterministic `predict`, matched to the labels; its
predictions are those presences.

Usage:
    python scripts/ship_preset.py runs/efficient_capsnet/preset \\
        --name efficient_capsnet_mnist --data-dir ../shared/data/mnist
"""

import argparse
import json
import os
import shutil
import tempfile

import keras
import numpy as np

import keras_capsules
from keras_capsules.datasets import mnist

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PRESETS = os.path.join(_REPO, "keras_capsules", "presets")
_PREDICTIONS = os.path.join(_REPO, "tests", "models", "preset_predictions.npz")
_REFERENCE_IMAGES = 32


def evaluate(model, x, y):
    """`(accuracy, predictions)` of `model` on images `x` with one-hot
    labels `y` (the module docstring says how each model is scored)."""
    labels = y.argmax(-1)
    if isinstance(model, keras_capsules.models.StackedCapsuleAutoencoder):
        canvases = mnist.PaddedDigits(x, batch_size=len(x), shuffle=False)[0]
        outputs = model.predict(canvases, batch_size=500, verbose=0)
        predictions = outputs["object_posterior_presence"]
        accuracy = keras_capsules.metrics.kmeans_accuracy(predictions, labels)
    else:
        predictions = model.predict(x, batch_size=100, verbose=0)
        accuracy = np.mean(predictions.argmax(-1) == labels)
    predictions = keras.ops.convert_to_numpy(predictions)
    return round(float(accuracy), 4), predictions


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="The preset directory a recipe wrote.")
    parser.add_argument("--name", required=True, help="The preset's name.")
    parser.add_argument("--data-dir", help="Folder with the MNIST .gz files.")
    parser.add_argument(
        "--weights-dtype", default="float32", choices=("float32", "float16")
    )
    args = parser.parse_args()

    with open(os.path.join(args.source, "config.json")) as f:
        class_name = json.load(f)["class_name"]
    cls = getattr(keras_capsules.models, class_name)
    with open(os.path.join(args.source, "metadata.json")) as f:
        trained = json.load(f)
    model = cls.from_preset(args.source)
    target = os.path.join(_PRESETS, args.name)
    with tempfile.TemporaryDirectory() as staging:
        # Re-saved, so that the weights are stored in the asked dtype.
        model.save_to_preset(staging, weights_dtype=args.weights_dtype)
        with open(os.path.join(staging, "metadata.json")) as f:
            stored = json.load(f)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(staging, target)
    os.chmod(target, 0o755)  # Not the private mode of a temporary folder.
    # Everything the recipe recorded, but the storage's own fields.
    metadata = {**trained, "weights_dtype": stored["weights_dtype"]}

    shipped = cls.from_preset(args.name)
    if args.data_dir:
        images, labels = mnist.load_arrays("test", manual_dir=args.data_dir)
        x = images[..., None].astype("float32") / 255.0
        y = np.eye(mnist.NUM_CLASSES, dtype="float32")[labels]
        metadata["trained_test_accuracy"] = trained["test_accuracy"]
        metadata["test_accuracy"], _ = evaluate(shipped, x, y)
    x, y = mnist.load_sample("test")
    metadata["sample_test_accuracy"], predictions = evaluate(shipped, x, y)
    with open(os.path.join(target, "metadata.json"), "w") as f:
        f.write(json.dumps(metadata, indent=2) + "\n")

    references = {}
    if os.path.exists(_PREDICTIONS):
        with np.load(_PREDICTIONS) as saved:
            references = dict(saved)
    references[args.name] = predictions[:_REFERENCE_IMAGES]
    np.savez(_PREDICTIONS, **references)
    print(json.dumps(metadata, indent=2))


if __name__ == "__main__":
    main()
