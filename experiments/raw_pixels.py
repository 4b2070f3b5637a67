"""What the shipped presets answer to raw pixels, and why MatrixCapsNet's
answer is 0 %.

Scores the trained classifier presets on the 1,000 test images of the embedded
MNIST sample as `[0, 1]` floats (what they were trained on) and as the
same images in `[0, 255]` floats (what `keras.utils.load_img` and
`image_dataset_from_directory` return). For the small MatrixCapsNet it then
reroutes the class capsules of the first 200 images with
`ops.em_routing(..., return_assignments=True)` and reports, for the true
class and the others: the activation, the mass of votes each class
receives (sum over children of activation x assignment) and the sum over
the 16 pose entries of the log of the spread of its votes, recomputed in
NumPy from that mass (without the routing's variance floor and mean
momentum). EM routing's activation logit is the mass times minus that log
spread plus a learned constant (Eq. 2 of the paper): votes 255 times
larger turn the sign, and the class with the most mass gets the lowest
activation. Writes `results.json` to `--output-dir`.

Usage:
    python experiments/raw_pixels.py --output-dir runs/raw_pixels
    python experiments/raw_pixels.py --smoke  # 20 images

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import json
import os

import numpy as np
from keras import ops

import keras_capsules
from keras_capsules.datasets import mnist

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--output-dir", default=os.path.join("runs", "raw_pixels"))
parser.add_argument(
    "--smoke", action="store_true", help="20 images, to check that it runs."
)
args = parser.parse_args()

x, y = mnist.load_sample("test")
if args.smoke:
    x, y = x[:20], y[:20]
labels = y.argmax(-1)
results = {}
for name, metadata in keras_capsules.models.list_presets().items():
    if metadata["class_name"] == "StackedCapsuleAutoencoder":
        continue  # no classes to predict: scored by k-means on its canvas
    model = keras_capsules.models.from_preset(name)
    results[name] = {
        f"accuracy_x{scale:g}": float(
            np.mean(
                model.predict(x * scale, batch_size=100, verbose=0).argmax(-1)
                == labels
            )
        )
        for scale in (1.0, 255.0)
    }

model = keras_capsules.models.from_preset("matrix_capsnet_small_mnist")
layer = model.class_caps
config = layer.get_config()
images, truth = x[:200], labels[:200]
rows = np.arange(len(truth))


def true_and_others(values):
    others = (values.sum(1) - values[rows, truth]) / (values.shape[1] - 1)
    return float(values[rows, truth].mean()), float(others.mean())


for scale in (1.0, 255.0):
    poses, activations = model.conv_caps2(
        model.conv_caps1(model.primary_caps(model.conv1(images * scale)))
    )
    _, height, width, num_in, pose_size, _ = poses.shape
    votes = ops.einsum("bhwipq,icqr->bhwicpr", poses, layer.kernel)
    if config["coordinate_addition"]:
        votes = keras_capsules.ops.add_coordinates(
            votes,
            coordinate_placement=config["coordinate_placement"],
            coordinate_scale=config["coordinate_scale"],
        )
    votes = ops.reshape(
        votes, (-1, height * width * num_in, layer.num_classes, pose_size**2)
    )
    activations = ops.reshape(activations, (-1, height * width * num_in))
    _, probabilities, assignments = keras_capsules.ops.em_routing(
        votes,
        activations,
        layer.beta_v,
        layer.beta_a,
        routing_iterations=config["routing_iterations"],
        final_lambda=config["final_lambda"],
        min_variance=config["min_variance"],
        epsilon=config["epsilon"],
        routing_mode=config["routing_mode"],
        return_assignments=True,
    )
    v, a, r, p = (
        ops.convert_to_numpy(t)
        for t in (votes, activations, assignments, probabilities)
    )
    weights = a[..., None] * r
    mass = weights.sum(1)
    mean = np.einsum("bij,bijd->bjd", weights, v) / mass[..., None]
    spread = np.einsum("bij,bijd->bjd", weights, (v - mean[:, None]) ** 2)
    log_spread = np.log(spread / mass[..., None]).sum(-1)
    results[f"matrix_capsnet_class_capsules_x{scale:g}"] = {
        "accuracy": float(np.mean(p.argmax(-1) == truth)),
        "activation_true_others": true_and_others(p),
        "mass_true_others": true_and_others(mass),
        "true_class_has_most_mass": float(np.mean(mass.argmax(-1) == truth)),
        "sum_log_spread_true_others": true_and_others(log_spread),
    }

os.makedirs(args.output_dir, exist_ok=True)
with open(os.path.join(args.output_dir, "results.json"), "w") as f:
    json.dump(results, f, indent=1)
print(json.dumps(results, indent=1))
