"""Draws the figures of the trained presets shipped with the package.

For every preset (or those named with `--preset`), on the first test
digits of the MNIST sample embedded in the package (no data files needed),
it draws what applies to the preset's model:

- `<preset>_reconstructions.png`: eight test digits above the decoder's
  reconstructions from their predicted class capsule (CapsNet,
  EfficientCapsNet);
- `<preset>_perturbation_grid.png`: what each dimension of the predicted
  class capsule of the first digit encodes (CapsNet, EfficientCapsNet);
- `<preset>_coupling_coefficients.png`: where dynamic routing sends the
  primary capsules' votes for the first digit (CapsNet);
- `<preset>_activation_maps.png`: where the capsules of each layer are
  active for the first digit (MatrixCapsNet);
- `<preset>_templates.png`, `<preset>_part_reconstructions.png` and
  `<preset>_presence_by_class.png`: the learned part templates, eight
  digits on the model's canvas with their reconstructions and the parts
  that explain them, and the posterior object presences by class of the
  1,000 sample test digits (StackedCapsuleAutoencoder).

Usage:
    python experiments/preset_figures.py --output-dir docs/images
    python experiments/preset_figures.py --preset efficient_capsnet_mnist
    # Check that everything runs (untrained networks saved as presets).
    python experiments/preset_figures.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import os
import tempfile

import keras
import numpy as np

import keras_capsules
from keras_capsules import visualization
from keras_capsules.datasets import mnist

NUM_RECONSTRUCTIONS = 8


def parse_args(argv=None):
    """Parses the command line."""
    parser = argparse.ArgumentParser(
        description="Draws the figures of the shipped trained presets."
    )
    parser.add_argument(
        "--preset",
        action="append",
        default=None,
        help="A shipped preset's name or a preset directory; repeat for "
        "several (default: every shipped preset).",
    )
    parser.add_argument("--output-dir", default="figures")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="Draw from an untrained EfficientCapsNet and a small untrained "
        "StackedCapsuleAutoencoder saved as presets.",
    )
    args = parser.parse_args(argv)
    if args.preset is None:
        args.preset = sorted(keras_capsules.models.list_presets())
    return args


def draw(model, name, images, labels, output_dir):
    """Saves the figures that apply to `model`; returns their paths."""
    figures = {}
    if isinstance(model, keras_capsules.models.StackedCapsuleAutoencoder):
        canvases = mnist.PaddedDigits(
            images, batch_size=len(images), shuffle=False
        )[0]
        figures["templates"] = visualization.learned_templates(model)
        figures["part_reconstructions"] = visualization.part_reconstructions(
            model, canvases[:NUM_RECONSTRUCTIONS]
        )
        figures["presence_by_class"] = visualization.object_presence_by_class(
            model, canvases, labels
        )
    elif isinstance(model, keras_capsules.models.MatrixCapsNet):
        figures["activation_maps"] = visualization.activation_maps(
            model, images[0], max_types=16
        )
    else:
        shown = images[:NUM_RECONSTRUCTIONS]
        figures["reconstructions"] = visualization.reconstructions(
            shown, keras.ops.convert_to_numpy(model.reconstruct(shown))
        )
        figures["perturbation_grid"] = visualization.perturbation_grid(
            model, images[0]
        )
    if isinstance(model, keras_capsules.models.CapsNet):
        figures["coupling_coefficients"] = visualization.coupling_coefficients(
            model, images[0]
        )
    paths = []
    for figure_name, figure in figures.items():
        path = os.path.join(output_dir, f"{name}_{figure_name}.png")
        figure.savefig(path, dpi=120)
        paths.append(path)
    return paths


def main(argv=None):
    args = parse_args(argv)
    print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
    os.makedirs(args.output_dir, exist_ok=True)
    images, labels = mnist.load_sample("test")
    with tempfile.TemporaryDirectory() as scratch:
        if args.smoke:
            smoke = os.path.join(scratch, "smoke")
            keras_capsules.models.EfficientCapsNet().save_to_preset(smoke)
            smoke_scae = os.path.join(scratch, "smoke_scae")
            keras_capsules.models.StackedCapsuleAutoencoder(
                num_parts=4, num_object_capsules=4, object_capsule_dim=16
            ).save_to_preset(smoke_scae)
            args.preset = [smoke, smoke_scae]
        for preset in args.preset:
            model = keras_capsules.models.from_preset(preset)
            name = os.path.basename(os.path.normpath(preset))
            paths = draw(
                model,
                name,
                np.asarray(images),
                np.asarray(labels).argmax(-1),
                args.output_dir,
            )
            for path in paths:
                print(f"Saved {path}.")


if __name__ == "__main__":
    main()
