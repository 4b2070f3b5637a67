"""White-box FGSM and BIM attacks on saved models: accuracy against epsilon.

Hinton, Sabour & Frosst, "Matrix capsules with EM routing" (ICLR 2018,
https://openreview.net/forum?id=HJWLfGWRb), section 5.2, report that
matrix capsules are less vulnerable than a CNN to the untargeted fast
gradient sign method (FGSM, Goodfellow et al. 2015) and its iterated form
(BIM, Kurakin et al. 2017); later work found that stronger attacks fool
capsule networks as well. This script measures the two simple attacks on
models saved by `affine_mnist.py` and `viewpoints_mnist.py` (or any
`.keras` classifier of MNIST digits), or on the trained presets shipped
with the package, on the same test digits for all.

Every model is attacked through the same loss, on the true label `t`
and the model's class scores `s` (CapsNet's capsule lengths,
MatrixCapsNet's activations, the CNN's softmax), with pixels in `[0, 1]`:
`max_{i != t} log s_i - log s_t`, the margin of the strongest wrong class
over the right one. For the CNN it is the margin of the logits (Carlini &
Wagner's loss). The models' training losses would not do: the margin and
spread losses are exactly zero, with a zero gradient, on digits that are
confidently right, and a saturated softmax zeroes the cross-entropy's, so
the attack could not move those digits at all.

- FGSM: `x + epsilon * sign(grad)`, clipped to `[0, 1]`.
- BIM: `--bim-steps` steps of size `2.5 * epsilon / steps`, each followed
  by the projection back into the `epsilon` box around the clean digit
  and into `[0, 1]` (no random start).

The test digits are the first `--images` MNIST test digits: as they are
for a 28x28 model, and on a 40x40 model placed at the random positions of
the affine experiment's translated test set (seed 1). The input gradients
need the backend's own autodiff, so that part of the code is per backend
(TensorFlow, JAX, PyTorch); the library itself stays backend-agnostic.

The script writes `results.json` (accuracy per model, attack and epsilon)
and `adversarial.png` (accuracy against epsilon, both attacks, one curve
per model) into `--output-dir`.

Usage:
    python experiments/adversarial.py --data-dir data/mnist \\
        --model CapsNet=runs/affine_mnist_capsnet/capsnet.keras \\
        --model CNN=runs/affine_mnist_cnn/cnn.keras
    # The trained presets shipped with the package, named as presets.
    python experiments/adversarial.py --data-dir data/mnist \\
        --model EfficientCapsNet=efficient_capsnet_mnist
    # Check that everything runs (tiny untrained models, a few digits).
    python experiments/adversarial.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import json
import os
import time

import _common
import keras
import numpy as np

import keras_capsules
from keras_capsules.datasets import affine_mnist

# The seed of the affine experiment's translated test set.
TRANSLATED_TEST_SEED = 1
# BIM's step, as a multiple of epsilon / steps.
BIM_STEP_SCALE = 2.5
# Scores are clipped here before the log, near float32's smallest normal
# number: a clipped score has no gradient.
TINY_SCORE = 1e-37
# Larger than any gap between log scores above TINY_SCORE.
WRONG_CLASS_SHIFT = 1e3
SMOKE_IMAGES = 8


def parse_args(argv=None):
    """Parses the command line."""
    parser = argparse.ArgumentParser(
        description="FGSM and BIM accuracy against epsilon of saved models."
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="A saved .keras model, a preset directory or a shipped preset "
        "name, and the name to plot it under; repeat for several models.",
    )
    parser.add_argument(
        "--epsilons",
        default="0,0.05,0.1,0.15,0.2,0.3",
        help="Comma-separated L-infinity budgets, for pixels in [0, 1].",
    )
    parser.add_argument("--bim-steps", type=int, default=10)
    parser.add_argument("--images", type=int, default=1000)
    _common.add_common_arguments(
        parser,
        output_dir=os.path.join("runs", "adversarial"),
        batch_size=100,
    )
    args = parser.parse_args(argv)
    try:
        args.epsilons = [float(e) for e in args.epsilons.split(",")]
    except ValueError:
        raise ValueError(
            "Expected --epsilons to be comma-separated numbers. "
            f"Received: epsilons={args.epsilons!r}"
        ) from None
    if not all(0 <= e <= 1 for e in args.epsilons):
        raise ValueError(
            "Expected every epsilon in [0, 1]. "
            f"Received: epsilons={args.epsilons}"
        )
    for name, value in (
        ("bim_steps", args.bim_steps),
        ("images", args.images),
        ("batch_size", args.batch_size),
    ):
        if value < 1:
            raise ValueError(
                f"Expected --{name.replace('_', '-')} >= 1. "
                f"Received: {name}={value}"
            )
    models = []
    for entry in args.model:
        name, sep, path = entry.partition("=")
        if not sep or not name or not path:
            raise ValueError(
                f"Expected --model NAME=PATH. Received: model={entry!r}"
            )
        if name in dict(models):
            raise ValueError(
                f"Expected a different name for every --model. "
                f"Received: model={entry!r}"
            )
        models.append((name, path))
    args.models = models
    if args.smoke:
        args.images = SMOKE_IMAGES
        args.batch_size = SMOKE_IMAGES
        args.bim_steps = 2
        args.epsilons = [0.0, 0.1]
    elif not models:
        parser.error("give at least one --model NAME=PATH (or --smoke)")
    return args


def smoke_models():
    """Tiny untrained models of the three kinds, on 28x28 digits."""
    shape = (28, 28, 1)
    capsnet = keras_capsules.models.CapsNet(
        image_shape=shape,
        conv_filters=16,
        num_primary_capsules=4,
        decoder_units=(32,),
    )
    capsnet.compile()
    matrix = keras_capsules.models.MatrixCapsNet.from_preset(
        "tiny", image_shape=shape, num_classes=10
    )
    matrix.compile()
    return [
        ("CapsNet", capsnet),
        ("MatrixCapsNet", matrix),
        ("CNN", _common.sabour_cnn(shape)),
    ]


def on_canvas(images, labels, size):
    """Test digits on a `size`x`size` canvas, and their one-hot labels."""
    if size != images.shape[1]:
        images = affine_mnist.translate(
            images, seed=TRANSLATED_TEST_SEED, canvas_size=size
        )
    return _common.as_inputs(images), _common.one_hot(labels)


def margin_loss(y, scores):
    """`max_{i != t} log s_i - log s_t`, summed over the digits, for
    one-hot labels `y` (class `t`) and positive class scores `s`."""
    log_scores = keras.ops.log(keras.ops.maximum(scores, TINY_SCORE))
    right = keras.ops.sum(y * log_scores, axis=-1)
    # The right class is pushed below every wrong one before the max.
    wrong = keras.ops.max(log_scores - y * WRONG_CLASS_SHIFT, axis=-1)
    return keras.ops.sum(wrong - right)


def input_gradient(model):
    """A function `(x, y) -> d margin_loss / d x` for `model`, written
    with the current backend's autodiff."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def gradient(x, y):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = margin_loss(y, model(x, training=False))
            return tape.gradient(loss, x)

        return lambda x, y: gradient(tf.constant(x), tf.constant(y)).numpy()
    if backend == "jax":
        import jax

        def loss(x, y, trainable, non_trainable):
            scores, _ = model.stateless_call(
                trainable, non_trainable, x, training=False
            )
            return margin_loss(y, scores)

        gradient = jax.jit(jax.grad(loss))

        def call(x, y):
            # Read the weights on every call: `predict` may replace the
            # arrays behind the variables.
            return np.asarray(
                gradient(
                    x,
                    y,
                    [v.value for v in model.trainable_variables],
                    [v.value for v in model.non_trainable_variables],
                )
            )

        return call
    if backend == "torch":
        import torch

        def gradient(x, y):
            x = keras.ops.convert_to_tensor(x).requires_grad_()
            y = keras.ops.convert_to_tensor(y)
            loss = margin_loss(y, model(x, training=False))
            (grad,) = torch.autograd.grad(loss, x)
            return grad.detach().cpu().numpy()

        return gradient
    raise ValueError(
        "Expected the tensorflow, jax or torch backend. "
        f"Received: backend={backend}"
    )


def attack(gradient, x, y, epsilon, steps, clean_gradient=None):
    """`x` perturbed by FGSM (`steps=1`) or BIM within the `epsilon` box.

    `clean_gradient`, the gradient at `x` if already known, saves the
    first call of `gradient`.
    """
    if epsilon == 0:
        return x
    if clean_gradient is None:
        clean_gradient = gradient(x, y)
    if steps == 1:
        return np.clip(x + epsilon * np.sign(clean_gradient), 0.0, 1.0)
    step = BIM_STEP_SCALE * epsilon / steps
    adversarial, direction = x, clean_gradient
    for i in range(steps):
        if i:
            direction = gradient(adversarial, y)
        adversarial = adversarial + step * np.sign(direction)
        adversarial = np.clip(adversarial, x - epsilon, x + epsilon)
        adversarial = np.clip(adversarial, 0.0, 1.0)
    return adversarial.astype("float32")


def sweep(model, x, y, args):
    """Accuracy per attack and epsilon, `{"fgsm": [...], "bim": [...]}`,
    and the number of digits whose loss has no gradient at all (which no
    attack of this kind can move)."""
    gradient = input_gradient(model)
    right = {name: np.zeros(len(args.epsilons)) for name in ("fgsm", "bim")}
    no_gradient = 0
    for start in range(0, len(x), args.batch_size):
        xb = x[start : start + args.batch_size]
        yb = y[start : start + args.batch_size]
        # FGSM's gradient is that of the clean digits, whatever epsilon.
        clean = gradient(xb, yb)
        no_gradient += int(np.sum(np.all(clean == 0, axis=(1, 2, 3))))
        for k, epsilon in enumerate(args.epsilons):
            for name, attacked in (
                ("fgsm", attack(gradient, xb, yb, epsilon, 1, clean)),
                (
                    "bim",
                    attack(gradient, xb, yb, epsilon, args.bim_steps, clean),
                ),
            ):
                scores = keras.ops.convert_to_numpy(
                    model.predict_on_batch(attacked)
                )
                right[name][k] += np.sum(scores.argmax(-1) == yb.argmax(-1))
    results = {name: (right[name] / len(x)).tolist() for name in right}
    for name in right:
        for epsilon, value in zip(args.epsilons, results[name]):
            print(f"  {name} epsilon {epsilon:g}: accuracy {value:.4f}")
    results["digits_without_gradient"] = no_gradient
    return results


def plot(results, epsilons, path):
    """Accuracy against epsilon, FGSM and BIM side by side."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 4.4), sharey=True)
    for ax, attack_name in zip(axes, ("fgsm", "bim")):
        for name, entry in results.items():
            ax.plot(epsilons, entry[attack_name], marker="o", label=name)
        ax.set_title(attack_name.upper())
        ax.set_xlabel("epsilon (L-infinity, pixels in [0, 1])")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    # Below the axes, where it hides no curve.
    figure.legend(
        *axes[0].get_legend_handles_labels(), loc="lower center", ncol=2
    )
    figure.tight_layout(rect=(0, 0.14, 1, 1))
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None):
    args = parse_args(argv)
    print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
    keras.utils.set_random_seed(args.seed)
    if args.smoke:
        models = smoke_models()
    else:
        models = [
            (name, _common.load_model(path)) for name, path in args.models
        ]
    _, (images, labels) = _common.load_digits(args)
    images, labels = images[: args.images], labels[: args.images]
    os.makedirs(args.output_dir, exist_ok=True)
    record = {
        "backend": keras.backend.backend(),
        "epsilons": args.epsilons,
        "bim_steps": args.bim_steps,
        "bim_step_scale": BIM_STEP_SCALE,
        "images": len(images),
        "models": dict(args.models),
        "results": {},
    }
    for name, model in models:
        size = model.inputs[0].shape[1]
        x, y = on_canvas(images, labels, size)
        print(f"{name}: {len(x)} test digits at {size}x{size}")
        start = time.monotonic()
        result = sweep(model, x, y, args)
        result["minutes"] = (time.monotonic() - start) / 60.0
        result["input_size"] = size
        record["results"][name] = result
        # Written after every model: a run cut short keeps what it measured.
        with open(os.path.join(args.output_dir, "results.json"), "w") as f:
            json.dump(record, f, indent=1)
    plot(
        record["results"],
        args.epsilons,
        os.path.join(args.output_dir, "adversarial.png"),
    )
    print(json.dumps(record, indent=1))
    return record


if __name__ == "__main__":
    main()
