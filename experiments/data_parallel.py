"""Data-parallel training of the capsule networks on several devices.

Trains `keras_capsules.models.CapsNet` (Sabour et al., 2017,
https://arxiv.org/abs/1710.09829), `EfficientCapsNet` (Mazzia et al.,
2021), `MatrixCapsNet` (Hinton et al., 2018,
https://openreview.net/forum?id=HJWLfGWRb) or `StackedCapsuleAutoencoder`
(Kosiorek et al., 2019) with the data-parallel engines Keras supports:
`tf.distribute.MirroredStrategy` on TensorFlow and
`keras.distribution.DataParallel` on JAX. Every device holds a copy of the
weights and takes an equal slice of each batch; the gradients are summed
across devices, so one step on N devices is one step on the whole batch.
PyTorch has no data-parallel engine in Keras: the script stops there with
an error.

The data is the MNIST sample shipped with the package: 28x28 digits, which
`--collectives` centres on the 40x40 canvases of the paper's SCAE.
`--cpu-devices N` splits the host CPU into N logical devices, to try
everything without accelerators.

`--check` trains the same initial weights on the same batches (no
shuffling, plain SGD) twice, on the devices and on a single device, and
ends its output with one JSON line: the backend, the replicas of both runs,
the largest weight difference between them, whether every replica holds
the same value of every variable, and both loss histories.

`--collectives` (JAX) compiles the data-parallel train, evaluate and
predict steps at each global batch of `--batch-sizes`, runs each once and
reads XLA's optimized HLO of exactly those steps (dumped with
`--xla_dump_to`): it ends its output with one JSON line giving, for every
step and batch, the collectives by kind, the bytes their results hold, and
the shape of each device's share of the input; and, from `--steps` steps
(one by default) of plain SGD at the first batch on the devices and on a
single device, as `--check` trains, both loss histories, the largest
weight difference and whether every replica holds the same value of every
variable. A data-parallel step should hold only all-reduces (of
gradients, metrics and batch statistics), whose bytes do not grow with
the batch, and each device should see its share.
`--model` takes several networks there, checked one after the other.
`--train-steps-only-after-first` compiles the evaluate and predict steps at
the first batch only (the train step, which holds the forward pass, at
every batch): the tests' shorter run.

Without `--check` or `--collectives` the script trains, prints the
progress of `fit`, saves the model as `<model>.keras` in `--output-dir`
and checks that the reloaded model predicts the same.

Usage:
    # Every GPU of the machine.
    KERAS_BACKEND=jax python experiments/data_parallel.py --model capsnet
    # Two logical CPU devices, compared with single-device training.
    KERAS_BACKEND=tensorflow python experiments/data_parallel.py \\
        --model matrix_capsnet --cpu-devices 2 --preset tiny --steps 3 \\
        --batch-size 8 --check
    # The collectives of the compiled steps of the paper's network.
    KERAS_BACKEND=jax python experiments/data_parallel.py \\
        --model matrix_capsnet --cpu-devices 2 --collectives \\
        --batch-sizes 8 16
    # Check that everything runs.
    python experiments/data_parallel.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow`.
"""

import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile

SUPPORTED_BACKENDS = ("tensorflow", "jax")
MODELS = (
    "capsnet",
    "efficient_capsnet",
    "matrix_capsnet",
    "stacked_capsule_autoencoder",
)
# The compiled steps of Keras's JAX trainer, by the names XLA gives their
# modules.
STEPS = ("train_step", "test_step", "predict_step")
# Every collective opcode of XLA's HLO; a data-parallel step should hold
# only the first.
COLLECTIVES = (
    "all-reduce",
    "all-gather",
    "all-to-all",
    "collective-permute",
    "reduce-scatter",
    "collective-broadcast",
    "ragged-all-to-all",
)

SMOKE_STEPS = 2
SMOKE_BATCH_SIZE = 8


def parse_args(argv=None):
    """Parses the command line; nothing here may import a framework."""
    parser = argparse.ArgumentParser(
        description="Data-parallel training of the capsule networks."
    )
    parser.add_argument(
        "--model",
        choices=MODELS,
        nargs="+",
        default=["capsnet"],
        help="The network; --collectives takes several, one after the other.",
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
        help="Training steps (per epoch without --check or --collectives). "
        "Defaults to one pass over the sample (one step with --collectives).",
    )
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="SGD learning rate of --check and --collectives: 0.1 by "
        "default, 1e-3 for the SCAE, whose summed log-likelihood has "
        "gradients a hundred times larger (training otherwise uses the "
        "model's default optimizer).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--check",
        action="store_true",
        help="Compare with single-device training and print a JSON line.",
    )
    parser.add_argument(
        "--collectives",
        action="store_true",
        help="(JAX) Count the collectives in the optimized HLO of the "
        "compiled train, evaluate and predict steps and print a JSON line.",
    )
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=(8, 16),
        help="The global batches of --collectives.",
    )
    parser.add_argument(
        "--train-steps-only-after-first",
        action="store_true",
        help="With --collectives: the evaluate and predict steps at the "
        "first of --batch-sizes only.",
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
    if args.batch_size < 1 or args.epochs < 1 or min(args.batch_sizes) < 1:
        parser.error("--batch-size(s) and --epochs must be positive")
    if args.check and args.collectives:
        parser.error("--check and --collectives are separate runs")
    if args.train_steps_only_after_first and not args.collectives:
        parser.error("--train-steps-only-after-first needs --collectives")
    if not args.collectives:
        if len(args.model) > 1:
            parser.error("only --collectives takes several --model")
        (args.model,) = args.model
    if args.output_dir is None:
        args.output_dir = os.path.join("runs", f"data_parallel_{args.model}")
    return args


def add_xla_flags(*flags):
    """Appends `flags` to `XLA_FLAGS`.

    Must run before JAX creates its CPU client, hence before Keras is
    imported. TensorFlow and PyTorch ignore the device count (TensorFlow
    gets its logical devices in `tensorflow_devices`).
    """
    os.environ["XLA_FLAGS"] = " ".join(
        [os.environ.get("XLA_FLAGS", ""), *flags]
    ).strip()


def force_cpu_devices(count):
    """Makes XLA on the host platform show `count` CPU devices to JAX."""
    add_xla_flags(f"--xla_force_host_platform_device_count={count}")


def dump_steps_hlo(directory):
    """Makes XLA write the HLO of the compiled steps (`STEPS`) as text into
    `directory`, before and after its optimizations."""
    add_xla_flags(
        f"--xla_dump_to={directory}",
        "--xla_dump_hlo_as_text",
        f"--xla_dump_hlo_module_re=jit_({'|'.join(STEPS)})",
    )


_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f16": 2, "bf16": 2, "s16": 2}
_BYTES.update({"u16": 2, "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8})
_BYTES.update({"u64": 8, "c64": 8, "c128": 16})
_ARRAY = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT )?%\S+ = (?P<type>.*?) "
    r"(?P<op>" + "|".join(COLLECTIVES) + r")(?:-start)?\("
)
# Keras's JAX trainer passes the batch as `data` (predict) or `data[i]`.
_DATA_PARAMETER = re.compile(
    r"= (?P<type>\S+) parameter\([0-9]+\).*op_name=\"data[\"\[]"
)


def _arrays(hlo_type):
    """`[(dtype, shape)]` of an HLO result type (an array or a tuple)."""
    hlo_type = re.sub(r"/\*.*?\*/", "", hlo_type)
    return [
        (dtype, tuple(int(d) for d in dims.split(",") if d))
        for dtype, dims in _ARRAY.findall(hlo_type)
    ]


def read_collectives(hlo_text):
    """The collectives of one optimized HLO module, and its inputs.

    Returns a dict: `collectives`, the count of each opcode of
    `COLLECTIVES` found (`-start` of an asynchronous pair counted once);
    `bytes`, what their results hold in all; and `data_shapes`, the shape
    of each of the step's data inputs (`data[...]` in Keras's JAX
    trainer) as one device receives it.
    """
    counts = {}
    total = 0
    data_shapes = []
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            op = match.group("op")
            counts[op] = counts.get(op, 0) + 1
            for dtype, shape in _arrays(match.group("type")):
                total += _BYTES.get(dtype, 4) * math.prod(shape)
            continue
        match = _DATA_PARAMETER.search(line)
        if match:
            data_shapes += [list(shape) for _, shape in _arrays(match["type"])]
    return {"collectives": counts, "bytes": total, "data_shapes": data_shapes}


def new_step_modules(directory, seen):
    """`{step: [read_collectives(...), ...]}` of the optimized modules of
    `STEPS` dumped into `directory` and not in `seen` (updated)."""
    found = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith("after_optimizations.txt") or name in seen:
            continue
        seen.add(name)
        step = next((s for s in STEPS if f"jit_{s}." in name), None)
        if step is None:
            continue
        with open(os.path.join(directory, name)) as f:
            record = read_collectives(f.read())
        if record not in found.setdefault(step, []):
            found[step].append(record)
    return found


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


def quick_initial_draws():
    """On JAX, a context in which the initialisers draw with the
    non-partitionable Threefry; elsewhere, none.

    With JAX's default, XLA's CPU compiler took 12.5 to 15 s to build one
    draw of a small kernel, about 0.3 s without (docs/performance.md): a
    model's first build here took 8 to 16 s. The steps compile outside,
    under JAX's default, with which the Stacked Capsule Autoencoder draws
    its noise inside the sharded train step.
    """
    import keras

    if keras.backend.backend() != "jax":
        return contextlib.nullcontext()
    import jax

    return jax.threefry_partitionable(False)


def build_compiled(engine, args, optimizer=None, weights=None):
    """Builds `--model` under `engine` (from `weights` when given) and
    compiles it with `optimizer()`, or the model's default for `None`.

    Returns `(model, initial_weights)`.
    """
    import keras

    with engine.scope(), quick_initial_draws():
        keras.utils.set_random_seed(args.seed)
        model = build_model(args)
        if weights is not None:
            model.set_weights(weights)
        initial_weights = model.get_weights()
        model.compile(optimizer="auto" if optimizer is None else optimizer())
    return model, initial_weights


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
    model, initial_weights = build_compiled(engine, args, optimizer, weights)
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


def sgd_learning_rate(args, model):
    """The learning rate of the plain SGD of `--check` and `--collectives`
    for `model`."""
    if args.learning_rate is not None:
        return args.learning_rate
    # At 0.1 the SCAE's loss grew from 800 to infinity in three steps.
    return 1e-3 if model == "stacked_capsule_autoencoder" else 0.1


def check(engine, single, args, x, y):
    """Trains on `engine` and on `single` from the same weights.

    Returns the report printed by `--check`.
    """
    import keras

    # Plain SGD: the update is linear in the gradient, so the runs differ
    # only by the order of the float sums of the gradient all-reduce.
    # Adam's normalisation would magnify that noise on near-zero gradients.
    def sgd():
        return keras.optimizers.SGD(sgd_learning_rate(args, args.model))

    model, history, initial = train(
        engine, args, x, y, optimizer=sgd, check=True
    )
    unsynced = engine.unsynced_variables(model)
    single_model, single_history, _ = train(
        single, args, x, y, optimizer=sgd, weights=initial, check=True
    )
    return {
        "backend": keras.backend.backend(),
        "model": args.model,
        "devices": engine.devices,
        "replicas": engine.replicas,
        "single_device_replicas": single.replicas,
        **training_report(
            model,
            initial,
            history.history,
            unsynced,
            single_model,
            single_history.history,
        ),
    }


def training_report(model, initial, history, unsynced, single, single_history):
    """`model`, trained from the weights `initial` with the logs `history`
    on the devices, against `single`, trained from the same weights on one
    device: the steps, both loss histories, the largest weight difference,
    the largest weight update (the scale the difference is judged against,
    without the scheduled spread margin), the variables whose replicas
    differ (`unsynced`) and MatrixCapsNet's scheduled margins."""
    import numpy as np

    weights = model.get_weights()
    report = {
        "steps": len(history["loss"]),
        "loss": [float(v) for v in history["loss"]],
        "single_device_loss": [float(v) for v in single_history["loss"]],
        "max_weight_diff": max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(weights, single.get_weights())
        ),
        "max_weight_update": max(
            float(np.max(np.abs(a - b)))
            for a, b, variable in zip(weights, initial, model.weights)
            if variable.trainable
        ),
        "replicas_identical": not unsynced,
        "unsynced_variables": unsynced,
    }
    if "spread_margin" in history:
        report["spread_margin"] = [float(v) for v in history["spread_margin"]]
    return report


def collectives(engine, single, args, x, y, directory):
    """For each model of `--model`: compiles its train, evaluate and
    predict steps under `engine` at each global batch of `--batch-sizes`
    (evaluate and predict at the first only, with
    `--train-steps-only-after-first`),
    runs each once and reads their optimized HLO dumped into `directory`;
    at the first batch it trains `--steps` steps (one by default) of plain
    SGD, each on the next batch, from the same weights on `engine` and on
    `single`, as `check` does.

    Returns the report printed by `--collectives`.
    """
    import keras
    import numpy as np

    steps = args.steps or 1

    def sgd_steps(place, name, batch, weights=None):
        options = argparse.Namespace(**{**vars(args), "model": name})

        def sgd():
            return keras.optimizers.SGD(sgd_learning_rate(args, name))

        model, initial = build_compiled(place, options, sgd, weights)
        # One step per epoch, as `train` with `check`: the scheduled
        # spread margin and the loss are logged at every step.
        history = model.fit(
            on_canvas(model, x[: batch * steps]),
            y[: batch * steps],
            batch_size=batch,
            epochs=steps,
            steps_per_epoch=1,
            shuffle=False,
            callbacks=callbacks(options, steps),
            verbose=0,
        ).history
        return model, initial, history

    def on_canvas(model, images):
        # The digits centred on the model's input (the paper's SCAE takes
        # 40x40 canvases).
        height, width = model.input_shape[1:3]
        top, left = (height - 28) // 2, (width - 28) // 2
        pads = ((0, 0), (top, height - 28 - top), (left, width - 28 - left))
        return np.pad(images, pads + ((0, 0),))

    seen = set()
    reports = []
    for name in args.model:
        new_step_modules(directory, seen)
        batches = []
        for batch in args.batch_sizes:
            labels = y[:batch]
            if not batches:
                model, initial, history = sgd_steps(engine, name, batch)
                unsynced = engine.unsynced_variables(model)
                found = new_step_modules(directory, seen)
                single_model, _, single_history = sgd_steps(
                    single, name, batch, initial
                )
                training = training_report(
                    model,
                    initial,
                    history,
                    unsynced,
                    single_model,
                    single_history,
                )
                new_step_modules(directory, seen)
            images = on_canvas(model, x[:batch])
            # Sets the engine's distribution again, after `single`'s.
            with engine.scope():
                if batches:
                    model.fit(images, labels, batch_size=batch, verbose=0)
                    found = new_step_modules(directory, seen)
                if not batches or not args.train_steps_only_after_first:
                    model.evaluate(images, labels, batch_size=batch, verbose=0)
                    model.predict(images, batch_size=batch, verbose=0)
            for step, modules in new_step_modules(directory, seen).items():
                found.setdefault(step, []).extend(modules)
            batches.append({"global_batch": batch, "steps": found})
        reports.append(
            {
                "model": name,
                "batches": batches,
                "training": {
                    "global_batch": args.batch_sizes[0],
                    **training,
                },
            }
        )
    return {
        "backend": keras.backend.backend(),
        "preset": args.preset,
        "devices": engine.devices,
        "models": reports,
    }


def main(argv=None):
    args = parse_args(argv)
    if args.cpu_devices:
        force_cpu_devices(args.cpu_devices)
    if args.collectives:
        directory = tempfile.mkdtemp(prefix="data_parallel_hlo_")
        dump_steps_hlo(directory)
    # Imported only now: JAX reads XLA_FLAGS when it starts.
    import keras

    import keras_capsules

    backend = keras.backend.backend()
    print(f"Backend: {backend}")
    if args.collectives and backend != "jax":
        print(
            "--collectives reads the steps that keras.distribution."
            "DataParallel compiles on JAX. Set KERAS_BACKEND=jax.",
            file=sys.stderr,
        )
        return 1
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
    batch_sizes = args.batch_sizes if args.collectives else [args.batch_size]
    if any(size % len(devices) for size in batch_sizes):
        print(
            f"--batch-size(s) ({', '.join(map(str, batch_sizes))}) must be "
            f"multiples of the number of devices ({len(devices)}).",
            file=sys.stderr,
        )
        return 1
    engine = Engine(backend, devices)

    x, y = keras_capsules.datasets.mnist.load_sample("train")
    if args.collectives:
        single = Engine(backend, devices[:1])
        report = collectives(engine, single, args, x, y, directory)
        print(json.dumps(report))
        return 0
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
