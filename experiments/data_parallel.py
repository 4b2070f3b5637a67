"""Data-parallel training of CapsNet and MatrixCapsNet on several devices.

Trains `keras_capsules.models.CapsNet` (Sabour et al., 2017,
https://arxiv.org/abs/1710.09829) or `keras_capsules.models.MatrixCapsNet`
(Hinton et al., 2018, https://openreview.net/forum?id=HJWLfGWRb) with the
data-parallel engines Keras supports: `tf.distribute.MirroredStrategy` on
TensorFlow and `keras.distribution.DataParallel` on JAX. Every device holds
a copy of the weights and takes an equal slice of each batch; the gradients
are summed across devices, so one step on N devices is one step on the
whole batch. PyTorch has no data-parallel engine in Keras: the script stops
there with an error.

The data is the MNIST sample shipped with the package (both models take
28x28 digits). `--cpu-devices N` splits the host CPU into N logical
devices, to try everything without accelerators.

`--check` trains the same initial weights on the same batches (no
shuffling, plain SGD) twice, on the devices and on a single device, and
ends its output with one JSON line: the backend, the replicas of both runs,
the largest weight difference between them, whether every replica holds
the same value of every variable, and both loss histories. Without
`--check` the script trains, prints the progress of `fit`, saves the model
as `<model>.keras` in `--output-dir` and checks that the reloaded model
predicts the same.

Usage:
    # Every GPU of the machine.
    KERAS_BACKEND=jax python experiments/data_parallel.py --model capsnet
    # Two logical CPU devices, compared with single-device training.
    KERAS_BACKEND=tensorflow python experiments/data_parallel.py \\
        --model matrix_capsnet --cpu-devices 2 --preset tiny --steps 3 \\
        --batch-size 8 --check
    # Check that everything runs.
    python experiments/data_parallel.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow`.
"""

import argparse
import json
import os
import sys

SUPPORTED_BACKENDS = ("tensorflow", "jax")

SMOKE_STEPS = 2
SMOKE_BATCH_SIZE = 8


def parse_args(argv=None):
    """Parses the command line; nothing here may import a framework."""
    parser = argparse.ArgumentParser(
        description="Data-parallel training of CapsNet or MatrixCapsNet."
    )
    parser.add_argument(
        "--model", choices=("capsnet", "matrix_capsnet"), default="capsnet"
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=None,
        help="Number of devices to train on: the first N GPUs, or CPUs "
        "when there is no GPU. Defaults to all of them.",
    )
    parser.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="Split the host CPU into this many logical devices (TensorFlow "
        "logical devices, JAX --xla_force_host_platform_device_count) and "
        "train on those.",
    )
    parser.add_argument(
        "--preset",
        choices=("paper", "tiny"),
        default="paper",
        help="The paper's network (MatrixCapsNet: A=B=C=D=32) or a tiny one "
        "for checks.",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="Global batch size, split evenly over the devices.",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="Training steps (per epoch without --check). Defaults to one "
        "pass over the sample.",
    )
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=0.1,
        help="SGD learning rate of --check (training otherwise uses the "
        "model's default Adam).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--check",
        action="store_true",
        help="Compare with single-device training and print a JSON line.",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="Where to save the trained model, <model>.keras. Defaults to "
        "runs/data_parallel_<model>.",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="A tiny network, a few steps, two logical CPU devices unless "
        "--cpu-devices is given.",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset = "tiny"
        args.steps = SMOKE_STEPS
        args.epochs = 1
        args.batch_size = SMOKE_BATCH_SIZE
        if args.cpu_devices is None:
            args.cpu_devices = 2
    for name in ("devices", "cpu_devices", "steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.batch_size < 1 or args.epochs < 1:
        parser.error("--batch-size and --epochs must be positive")
    if args.output_dir is None:
        args.output_dir = os.path.join("runs", f"data_parallel_{args.model}")
    return args


def force_cpu_devices(count):
    """Makes XLA on the host platform show `count` CPU devices to JAX.

    Must run before JAX creates its CPU client, hence before Keras is
    imported. TensorFlow and PyTorch ignore the flag (TensorFlow gets its
    logical devices in `tensorflow_devices`).
    """
    flag = f"--xla_force_host_platform_device_count={count}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}"


def tensorflow_devices(args):
    """The TensorFlow device names to mirror the model on."""
    import tensorflow as tf

    if args.cpu_devices:
        # Logical devices can only be set up before the TensorFlow runtime
        # starts, that is before the first op or device listing.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.cpu_devices
        )
        kind = "CPU"
    else:
        kind = "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
    devices = [d.name for d in tf.config.list_logical_devices(kind)]
    return devices[: args.devices] if args.devices else devices


def jax_devices(args):
    """The Keras device names (`"cpu:0"`, ...) to replicate the model on."""
    import keras

    kind = "cpu" if args.cpu_devices else None
    devices = keras.distribution.list_devices(kind)
    return devices[: args.devices] if args.devices else devices


class Engine:
    """One way of placing a model: on the devices, or on a single device.

    `scope()` wraps model creation and compilation, `replicas` counts the
    copies of the weights, and `unsynced_variables(model)` names the
    variables whose replicas differ or that are not on every device.
    """

    def __init__(self, backend, devices):
        import keras

        self.backend = backend
        self.devices = list(devices)
        self.replicas = len(self.devices)
        self._strategy = None
        self._distribution = None
        if backend == "tensorflow":
            import tensorflow as tf

            # One device is plain TensorFlow, without any strategy.
            if self.replicas > 1:
                self._strategy = tf.distribute.MirroredStrategy(self.devices)
        elif self.replicas > 1:
            self._distribution = keras.distribution.DataParallel(
                devices=self.devices
            )

    def scope(self):
        import contextlib

        import keras

        if self.backend == "tensorflow":
            if self._strategy is None:
                return contextlib.nullcontext()
            return self._strategy.scope()
        # On JAX the distribution is global state read when variables are
        # created and when `fit` shards a batch: set it for this engine
        # only, so the single-device run does not inherit it.
        keras.distribution.set_distribution(self._distribution)
        return contextlib.nullcontext()

    def unsynced_variables(self, model):
        import numpy as np

        variables = list(model.weights) + list(model.optimizer.variables)
        unsynced = []
        for variable in variables:
            copies = self._replica_values(variable)
            if len(copies) != self.replicas or any(
                not np.array_equal(copies[0], copy) for copy in copies[1:]
            ):
                unsynced.append(variable.path)
        return unsynced

    def _replica_values(self, variable):
        import numpy as np

        value = variable.value
        if self.backend == "tensorflow":
            # A MirroredVariable holds one variable per device; anything
            # else lives on one device only.
            copies = getattr(value, "values", (value,))
            return [np.asarray(copy.numpy()) for copy in copies]
        # A replicated jax.Array has one full copy per device.
        return [np.asarray(shard.data) for shard in value.addressable_shards]


def build_model(args):
    """The model of `--model` and `--preset`, not yet compiled."""
    # Imported late as it imports Keras (see `main`).
    import _common

    if args.preset == "tiny":
        return _common.small_model(args.model)
    return _common.paper_model(args.model)


def callbacks(args, total_steps):
    """The spread-margin ramp of MatrixCapsNet, over the whole run."""
    import keras_capsules

    if args.model != "matrix_capsnet":
        return []
    # Stepping the margin on every batch also checks that a variable
    # assigned between steps reaches every replica.
    return [
        keras_capsules.callbacks.SpreadMarginScheduler(
            ramp_steps=max(1, total_steps)
        )
    ]


def train(engine, args, x, y, optimizer=None, weights=None, check=False):
    """Builds, compiles and fits a model under `engine`.

    `optimizer` is a function returning the optimizer, or `None` for the
    model's default: either way it is created in the engine's scope, as
    MirroredStrategy must mirror its variables too.

    With `check`, every epoch is a single step over the batches in order,
    so that `history.history["loss"]` holds the loss of each step.

    Returns:
        `(model, history, initial_weights)`, the latter the weights the
        model started from: `weights` when given, else its initialisation.
    """
    import keras

    with engine.scope():
        keras.utils.set_random_seed(args.seed)
        model = build_model(args)
        if weights is not None:
            model.set_weights(weights)
        initial_weights = model.get_weights()
        model.compile(optimizer="auto" if optimizer is None else optimizer())
    steps = len(x) // args.batch_size
    if check:
        fit_kwargs = dict(epochs=steps, steps_per_epoch=1, shuffle=False)
    else:
        fit_kwargs = dict(epochs=args.epochs, shuffle=True)
    history = model.fit(
        x,
        y,
        batch_size=args.batch_size,
        callbacks=callbacks(args, steps * (1 if check else args.epochs)),
        verbose=0 if check else 1,
        **fit_kwargs,
    )
    return model, history, initial_weights


def check(engine, single, args, x, y):
    """Trains on `engine` and on `single` from the same weights.

    Returns the report printed by `--check`.
    """
    import keras
    import numpy as np

    # Plain SGD: the update is linear in the gradient, so the runs differ
    # only by the order of the float sums of the gradient all-reduce.
    # Adam's normalisation would magnify that noise on near-zero gradients.
    def sgd():
        return keras.optimizers.SGD(learning_rate=args.learning_rate)

    model, history, initial = train(
        engine, args, x, y, optimizer=sgd, check=True
    )
    unsynced = engine.unsynced_variables(model)
    weights = [np.asarray(w) for w in model.get_weights()]
    single_model, single_history, _ = train(
        single, args, x, y, optimizer=sgd, weights=initial, check=True
    )
    single_weights = single_model.get_weights()
    report = {
        "backend": keras.backend.backend(),
        "model": args.model,
        "devices": engine.devices,
        "replicas": engine.replicas,
        "single_device_replicas": single.replicas,
        "steps": len(history.history["loss"]),
        "max_weight_diff": max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(weights, single_weights)
        ),
        # The scale of training, against which max_weight_diff is judged;
        # without the scheduled spread margin.
        "max_weight_update": max(
            float(np.max(np.abs(a - b)))
            for a, b, variable in zip(weights, initial, model.weights)
            if variable.trainable
        ),
        "replicas_identical": not unsynced,
        "unsynced_variables": unsynced,
        "loss": [float(v) for v in history.history["loss"]],
        "single_device_loss": [
            float(v) for v in single_history.history["loss"]
        ],
    }
    if "spread_margin" in history.history:
        report["spread_margin"] = [
            float(v) for v in history.history["spread_margin"]
        ]
    return report


def main(argv=None):
    args = parse_args(argv)
    if args.cpu_devices:
        force_cpu_devices(args.cpu_devices)
    # Imported only now: JAX reads XLA_FLAGS when it starts.
    import keras

    import keras_capsules

    backend = keras.backend.backend()
    print(f"Backend: {backend}")
    if backend not in SUPPORTED_BACKENDS:
        print(
            f"Data-parallel training is not supported on the {backend} "
            "backend: Keras offers it through tf.distribute on TensorFlow "
            "and keras.distribution on JAX. Set KERAS_BACKEND=tensorflow "
            "or KERAS_BACKEND=jax.",
            file=sys.stderr,
        )
        return 1
    if backend == "tensorflow":
        devices = tensorflow_devices(args)
    else:
        devices = jax_devices(args)
    if args.batch_size % len(devices):
        print(
            f"--batch-size ({args.batch_size}) must be a multiple of the "
            f"number of devices ({len(devices)}).",
            file=sys.stderr,
        )
        return 1
    engine = Engine(backend, devices)

    x, y = keras_capsules.datasets.mnist.load_sample("train")
    steps = args.steps or len(x) // args.batch_size
    num_images = steps * args.batch_size
    if num_images > len(x):
        print(
            f"The sample holds {len(x)} images, fewer than --steps x "
            f"--batch-size = {num_images}.",
            file=sys.stderr,
        )
        return 1
    x, y = x[:num_images], y[:num_images]

    if args.check:
        single = Engine(backend, devices[:1])
        print(json.dumps(check(engine, single, args, x, y)))
        return 0

    print(f"Training on {engine.replicas} device(s): {engine.devices}")
    model, _, _ = train(engine, args, x, y)
    x_test, _ = keras_capsules.datasets.mnist.load_sample("test")
    # Imported late as it imports Keras (see above).
    import _common

    _common.save_and_reload(
        model,
        os.path.join(args.output_dir, f"{args.model}.keras"),
        x_test[: args.batch_size],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
