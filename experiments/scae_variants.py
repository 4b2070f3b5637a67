"""Stacked Capsule Autoencoder training variants, scored alike.

Trains `StackedCapsuleAutoencoder` in the official MNIST configuration
(`from_preset("scae_mnist")`) or a variant of it, from the initial weights
of `--seed`, for `--steps` steps of 128 digits placed at random on the
40x40 canvas (`mnist.PaddedDigits`, full batches). The last
`--validation` training digits are held out (on canvases drawn once);
every `--eval-every` steps they score the object capsules as the SCAE
recipe does: the two probes' accuracy and k-means accuracy (10 clusters,
Hungarian matching, fitted on the scored features) on the prior object
presences and on the posterior part mass each object explains, with the
deterministic `predict`. The loss and its terms are averaged over every
`--log-every` steps. Each evaluation appends one JSON line to `--jsonl`.
With `--test`, the 10,000 test digits (or the sample's 1,000) are scored
once at the end, deterministically and with the official noisy
evaluation (presence noise at inference, seed 0). `--save` writes the
trained model, its optimizer state included, to a `.keras` file
(`--checkpoints DIR`: to `DIR/STEP.keras` at every evaluation, to choose
where to stop on the validation digits);
`--resume` continues such a file to `--steps` steps in all, on the
batches an uninterrupted run would have drawn. `--plot OUT.png` draws
the curves of every run in `--jsonl` (validation accuracies and the
image and part log-likelihoods against the step) and trains nothing.

A variant is a set of flags: the Set Transformer's `--presence-masking`,
`--normalize-part-mixing`, the presence `--noise-scale`, a factor on the
loss's four sparsity weights (`--sparsity-scale`), and the
optimizer (`official`: `compile()`'s RMSprop at a constant 3e-5;
`rmsprop`: the same RMSprop at `--learning-rate`; `adam`) with a linear
warm-up over `--warmup-steps` and then a cosine to `--floor` times the
rate over the remaining steps (`--floor 1`: constant); with
`--decay-from S`, the rate is held after the warm-up until step `S` and
follows the cosine from there (a run resumed with it continues at the
rate it has reached: a constant-rate run given a decay at its end).
`--preset DIR`, with `--test`, saves the trained network as a preset
directory whose metadata holds the test scores and the command that
trains it from the start.

Usage:
    KERAS_BACKEND=tensorflow python experiments/scae_variants.py \\
        --data-dir path/to/mnist --name official --steps 5000 \\
        --jsonl runs/scae_variants.jsonl
    KERAS_BACKEND=tensorflow python experiments/scae_variants.py \\
        --data-dir path/to/mnist --name log_adam --presence-masking log \\
        --optimizer adam --learning-rate 3e-4 --warmup-steps 500
    python experiments/scae_variants.py --jsonl runs/scae_variants.jsonl \\
        --plot scae_variants.png
    python experiments/scae_variants.py --smoke
"""

import argparse
import json
import os
import time

import keras
import numpy as np
from _common import WarmupHoldCosine
from _common import append_jsonl
from _common import load_digits
from _common import warmup_cosine

import keras_capsules
from keras_capsules import metrics
from keras_capsules.datasets import mnist
from keras_capsules.losses import StackedCapsuleAutoencoderLoss
from keras_capsules.losses.stacked_capsule_autoencoder_loss import (
    DEFAULT_WEIGHTS,
)
from keras_capsules.optimizers import RMSprop

SCAE = keras_capsules.models.StackedCapsuleAutoencoder
SMOKE_SIZE = dict(num_parts=4, num_object_capsules=4, object_capsule_dim=16)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--name", default="official")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="Steps in all (default 5000; 2 with --smoke).",
    )
    parser.add_argument("--eval-every", type=int, default=500)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--validation", type=int, default=10000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument(
        "--presence-masking",
        default="most_present",
        choices=("most_present", "log"),
    )
    parser.add_argument("--normalize-part-mixing", action="store_true")
    parser.add_argument("--noise-scale", type=float, default=4.0)
    parser.add_argument(
        "--sparsity-scale",
        type=float,
        default=1.0,
        help="Multiplies the loss's four sparsity weights.",
    )
    parser.add_argument(
        "--optimizer",
        default="official",
        choices=("official", "rmsprop", "adam"),
    )
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--floor", type=float, default=1.0)
    parser.add_argument(
        "--decay-from",
        type=int,
        default=None,
        help="Hold the rate after the warm-up until this step, then a "
        "cosine to --floor times the rate by --steps.",
    )
    parser.add_argument("--test", action="store_true")
    parser.add_argument(
        "--preset",
        default=None,
        help="With --test: a preset directory to save the network to.",
    )
    parser.add_argument("--jsonl", default="scae_variants.jsonl")
    parser.add_argument("--save", default=None, help="A .keras file.")
    parser.add_argument(
        "--checkpoints",
        default=None,
        help="A directory: saves STEP.keras there at every evaluation.",
    )
    parser.add_argument(
        "--resume",
        default=None,
        help="A .keras file written by --save with the same flags.",
    )
    parser.add_argument("--plot", default=None, help="A .png file.")
    parser.add_argument("--smoke", action="store_true", help="A tiny run.")
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 2 if args.smoke else 5000
    if args.decay_from is not None and not (
        args.warmup_steps <= args.decay_from < args.steps
    ):
        parser.error(
            "--decay-from must lie between the warm-up's end and --steps. "
            f"Received: --decay-from={args.decay_from}"
        )
    if args.preset and not args.test:
        parser.error("--preset saves a scored network: it needs --test.")
    if args.smoke:
        args.eval_every, args.log_every = 2, 1
        args.validation, args.batch_size = 20, 8
    return args


class Window(keras.utils.PyDataset):
    """`steps` consecutive batches of `data` an epoch, continuing where the
    previous epoch stopped (across `data`'s own epochs)."""

    def __init__(self, data, steps, window=0):
        super().__init__()
        self.data, self.steps, self.window = data, steps, window

    def __len__(self):
        return self.steps

    def __getitem__(self, index):
        epoch, index = divmod(self.window * self.steps + index, len(self.data))
        if self.data.epoch != epoch:
            self.data.epoch = epoch
        return self.data[index]

    def on_epoch_end(self):
        self.window += 1


def schedule(args):
    """The variant's learning rate (see the module's docstring)."""
    if args.decay_from is None:
        return warmup_cosine(
            args.learning_rate, args.steps, args.warmup_steps, args.floor
        )
    return WarmupHoldCosine(
        args.learning_rate,
        args.steps,
        args.warmup_steps,
        args.decay_from,
        args.floor,
    )


def optimizer(model, args):
    """`None` for `compile()`'s official RMSprop, else the variant's."""
    if args.optimizer == "official":
        return None
    rate = schedule(args)
    if args.optimizer == "adam":
        return keras.optimizers.Adam(rate)
    official = model.default_optimizer()
    return RMSprop(
        rate,
        rho=official.rho,
        momentum=official.momentum,
        epsilon=official.epsilon,
        initial_velocity=official.initial_velocity,
    )


def score(model, canvases, labels):
    out = model.predict(canvases, batch_size=500, verbose=0)
    result = {}
    for kind, name in (
        ("prior", "object_presence"),
        ("posterior", "object_posterior_presence"),
    ):
        logits = out[f"{kind}_logits"]
        result[f"{kind}_probe"] = float(np.mean(logits.argmax(-1) == labels))
        result[f"{kind}_kmeans"] = metrics.kmeans_accuracy(out[name], labels)
        finite = np.isfinite(out[name]).all() and np.isfinite(logits).all()
        result[f"{kind}_finite"] = bool(finite)
    return result


# The flags that define a run, as its records and its command spell them.
RUN_FLAGS = (
    "name",
    "seed",
    "presence_masking",
    "normalize_part_mixing",
    "noise_scale",
    "sparsity_scale",
    "optimizer",
    "learning_rate",
    "warmup_steps",
    "floor",
    "decay_from",
    "batch_size",
)


def command(args):
    """The command that trains the run of `args` from the start."""
    words = [
        f"KERAS_BACKEND={keras.backend.backend()}",
        "python experiments/scae_variants.py --data-dir path/to/mnist",
    ]
    for key in RUN_FLAGS + ("steps", "validation", "eval_every"):
        value = getattr(args, key)
        flag = "--" + key.replace("_", "-")
        if value is True:
            words.append(flag)
        elif value is not None and value is not False:
            words.append(f"{flag} {value}")
    words.append(f"--jsonl runs/{args.name}.jsonl --test")
    words.append(f"--preset {args.preset}")
    return " ".join(words)


def run_minutes(jsonl, name, steps):
    """The minutes that the run `name` of `jsonl` took to its evaluation
    at `steps`, summed over the invocations that resumed it (an
    invocation that went beyond `steps` counts to `steps`)."""
    last = {}
    with open(jsonl) as file:
        for line in file:
            record = json.loads(line)
            if (
                record["name"] == name
                and "validation" in record
                and record["step"] <= steps
            ):
                last[record.get("resumed_at", 0)] = record["minutes"]
    return round(sum(last.values()), 1)


def save_preset(model, args, record, images):
    """Saves the scored `model` as the preset directory `args.preset`;
    `images` counts the digits of each split."""
    test, official = (
        {k: v for k, v in record[key].items() if "finite" not in k}
        for key in ("test", "test_official")
    )
    model.save_to_preset(
        args.preset,
        metadata={
            "description": "A Stacked Capsule Autoencoder trained on MNIST "
            f"digits without labels: the {args.name} run of "
            "experiments/scae_variants.py. Its test_accuracy is the "
            "k-means accuracy of the posterior object presences on the "
            "test digits (deterministic predict).",
            "dataset": "mnist",
            "images": images,
            "test_accuracy": test["posterior_kmeans"],
            "test_scores": test,
            "test_official_scores": official,
            "steps": args.steps,
            "batch_size": args.batch_size,
            "images_seen": args.steps * args.batch_size,
            "seed": args.seed,
            "training_minutes": run_minutes(args.jsonl, args.name, args.steps),
            "pixel_range": [0.0, 1.0],
            "command": command(args),
        },
    )


PANELS = (
    ("validation", "posterior_kmeans", "posterior k-means"),
    ("validation", "posterior_probe", "posterior probe"),
    ("validation", "prior_kmeans", "prior k-means"),
    ("losses", "image_log_likelihood", "image log-likelihood"),
    ("losses", "part_log_likelihood", "part log-likelihood"),
    ("losses", "loss", "loss"),
)


def plot(jsonl, path):
    """Every run of `jsonl` (by name), one panel per quantity of
    `PANELS`."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    runs = {}
    with open(jsonl) as file:
        for line in file:
            record = json.loads(line)
            if "validation" in record:
                runs.setdefault(record["name"], []).append(record)
    # Ten colours, then the same ones dashed with square markers, so that
    # every run keeps a look of its own in every panel.
    colors = plt.get_cmap("tab10").colors
    styles = {
        name: {
            "color": colors[i % len(colors)],
            "linestyle": "-" if i < len(colors) else "--",
        }
        for i, name in enumerate(runs)
    }
    figure, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    for ax, (kind, key, title) in zip(axes.flat, PANELS):
        for name, records in runs.items():
            style = styles[name]
            if kind == "validation":
                steps = [r["step"] for r in records]
                values = [100 * r["validation"][key] for r in records]
                marker = "o" if style["linestyle"] == "-" else "s"
                ax.plot(steps, values, marker=marker, label=name, **style)
            else:
                points = [p for r in records for p in r["losses"]]
                steps = [p["step"] for p in points]
                ax.plot(steps, [p[key] for p in points], **style)
        ax.set_title(title + (" (%)" if kind == "validation" else ""))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[1, 1].set_ylim(bottom=0)
    figure.legend(
        *axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=3
    )
    figure.tight_layout(rect=(0, 0.13, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv=None):
    args = parse_args(argv)
    if args.plot:
        plot(args.jsonl, args.plot)
        return
    keras.utils.set_random_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_digits(args)
    x_train, x_test = x_train[..., None], x_test[..., None]
    if args.smoke:
        x_train, y_train = x_train[:36], y_train[:36]
        x_test, y_test = x_test[:20], y_test[:20]
    x_val, y_val = x_train[-args.validation :], y_train[-args.validation :]
    x_fit, y_fit = x_train[: -args.validation], y_train[: -args.validation]
    train = mnist.PaddedDigits(
        x_fit,
        y_fit,
        batch_size=args.batch_size,
        seed=args.seed,
        drop_remainder=True,
    )
    val = mnist.PaddedDigits(x_val, batch_size=len(x_val), shuffle=False)[0]

    # The same initial weights for every variant of one seed: `seed` fixes
    # only the templates (and the noise), the other initializers draw from
    # Keras's global seed, so every variant takes the weights of the first
    # network built after `set_random_seed`. `--smoke` runs a small one.
    size = SMOKE_SIZE if args.smoke else {}
    done = 0
    if args.resume:
        model = keras.saving.load_model(args.resume)
        done = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        if args.decay_from is not None:
            model.optimizer.learning_rate = schedule(args)
    else:
        initial = SCAE.from_preset("scae_mnist", seed=args.seed, **size)
        model = SCAE.from_preset(
            "scae_mnist",
            seed=args.seed,
            **size,
            presence_masking=args.presence_masking,
            normalize_part_mixing=args.normalize_part_mixing,
            noise_scale=args.noise_scale,
        )
        model.set_weights(initial.get_weights())
        weights = {
            name: value * args.sparsity_scale
            for name, value in DEFAULT_WEIGHTS.items()
            if "sparsity" in name
        }
        model.compile(
            optimizer=optimizer(model, args) or "auto",
            loss=StackedCapsuleAutoencoderLoss(
                num_classes=model.num_classes, **weights
            ),
        )

    config = {key: getattr(args, key) for key in RUN_FLAGS}
    config["resumed_at"] = done
    config["validation_images"] = len(x_val)
    config["backend"] = keras.backend.backend()
    first_window = done // args.log_every
    windows = Window(train, args.log_every, first_window)
    start = time.time()
    curve = []

    class Evaluate(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            step = (epoch + 1) * args.log_every
            curve.append(
                {"step": step, **{k: float(v) for k, v in logs.items()}}
            )
            if step % args.eval_every:
                return
            record = {
                **config,
                "step": step,
                "minutes": round((time.time() - start) / 60, 2),
                "validation": score(model, val, y_val),
                "losses": curve[-(args.eval_every // args.log_every) :],
            }
            append_jsonl(args.jsonl, record)
            print(json.dumps({k: record[k] for k in ("step", "validation")}))
            if args.checkpoints:
                model.save(os.path.join(args.checkpoints, f"{step}.keras"))

    if args.checkpoints:
        os.makedirs(args.checkpoints, exist_ok=True)
    model.fit(
        windows,
        initial_epoch=first_window,
        epochs=args.steps // args.log_every,
        shuffle=False,
        callbacks=[Evaluate()],
        verbose=2,
    )
    if args.save:
        model.save(args.save)
    if args.test:
        test = mnist.PaddedDigits(
            x_test, batch_size=len(x_test), shuffle=False
        )[0]
        official = SCAE.from_config(
            {**model.get_config(), "inference_noise_seed": 0}
        )
        official.set_weights(model.get_weights())
        record = {
            **config,
            "step": args.steps,
            "test": score(model, test, y_test),
            "test_official": score(official, test, y_test),
        }
        append_jsonl(args.jsonl, record)
        print(json.dumps(record))
        if args.preset:
            images = dict(train=len(x_fit), val=len(x_val), test=len(x_test))
            save_preset(model, args, record, images)


if __name__ == "__main__":
    main()
