"""Data-parallel training over several processes with keras.distribution.

Every process runs this script with the environment variables that
`keras.distribution.initialize()` reads (`KERAS_DISTRIBUTION_JOB_ADDRESSES`,
`KERAS_DISTRIBUTION_NUM_PROCESSES`, `KERAS_DISTRIBUTION_PROCESS_ID`), one
process per host, or `--processes N` starts N of them on this machine
(each pinned to `--threads` cores of its own where it can be) and waits for
them. JAX only: Keras has no multi-process engine for TensorFlow or
PyTorch (docs/data_parallel.md).

Every process builds the same network from the same seed, takes its share
of every global batch of one seeded stream (`mnist.ShiftedDigits(...,
num_processes=, process_id=)` on the MNIST sample that ships with the
package; for the Stacked Capsule Autoencoder `mnist.PaddedDigits` on the
model's canvas, with integer labels for its probes), and trains with
`keras.distribution.DataParallel(auto_shard_dataset=False)`: JAX
assembles the global batch from the processes' shares, and the gradients
are all-reduced, so one step of N processes is one step on the global
batch (and the autoencoder's loss, whose sparsity terms are taken over
the batch, and its presence noise are those of the global batch).
`--models` trains the smallest network of each family named
(`_common.small_model`: `capsnet`, `efficient_capsnet`, `matrix_capsnet`,
`stacked_capsule_autoencoder`), or the paper's with `--architecture
paper`.

Each process writes `process_<id>.npz` to `--output-dir` (per model: the
initial and final weights and the losses); process 0 alone also writes
each model as a preset, `<model>_preset`, and prints a JSON line: the
processes, img/s after the first epoch and, with `--timing`, the time of
one all-reduce of as many float32 values as the model has weights. With
`--backup-dir`, every process backs its state up in its own folder there
(`keras.callbacks.BackupAndRestore`) and a run started again with the same
flags resumes: `--interrupt-at-epoch E` stops the run before epoch E, as a
killed job would.

Usage:
    # Two processes on this machine, one core each.
    KERAS_BACKEND=jax python experiments/multi_process.py --processes 2 \\
        --threads 1 --models efficient_capsnet --steps 20 --timing
    # The same global batches in one process with two threads.
    KERAS_BACKEND=jax python experiments/multi_process.py --processes 1 \\
        --threads 2 --models efficient_capsnet --steps 20 --timing
    # Process 0 of two hosts (the other runs it with PROCESS_ID=1).
    KERAS_BACKEND=jax KERAS_DISTRIBUTION_JOB_ADDRESSES=host0:1234 \\
        KERAS_DISTRIBUTION_NUM_PROCESSES=2 KERAS_DISTRIBUTION_PROCESS_ID=0 \\
        python experiments/multi_process.py --models efficient_capsnet
    # Check that everything runs.
    KERAS_BACKEND=jax python experiments/multi_process.py --smoke
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import _common
import keras
import numpy as np

import keras_capsules
from keras_capsules.datasets import mnist
from keras_capsules.models import _presets as presets

ADDRESS_VARIABLE = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
COUNT_VARIABLE = "KERAS_DISTRIBUTION_NUM_PROCESSES"
ID_VARIABLE = "KERAS_DISTRIBUTION_PROCESS_ID"
# The cores the launcher gives a process; not a Keras variable.
CORES_VARIABLE = "MULTI_PROCESS_CORES"
MODELS = _common.MODEL_FAMILIES


def parse_args(argv=None):
    """Parses the command line."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=MODELS,
        default=["efficient_capsnet"],
        help="The families whose smallest network to train, in turn.",
    )
    parser.add_argument(
        "--architecture",
        choices=("small", "paper"),
        default="small",
        help="The smallest network of each family (_common.small_model), "
        "or the paper's (CapsNet's 8.2M parameters, EfficientCapsNet's "
        "MNIST network, MatrixCapsNet's A=B=C=D=32, the Stacked Capsule "
        "Autoencoder's official MNIST network on 40x40 canvases).",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="Start this many processes on this machine and wait for them "
        "(the launcher); without it, this process is one of the job that "
        "the KERAS_DISTRIBUTION_* variables describe, or the only one.",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="With --processes: pin each process to this many cores of "
        "its own (Linux), which sizes XLA's thread pool.",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="With --processes: seconds to wait for the processes before "
        "stopping them all with an error.",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="Global batch size, split evenly over the processes.",
    )
    parser.add_argument(
        "--steps", type=int, default=4, help="Training steps per epoch."
    )
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="Train with plain SGD at this rate instead of the model's "
        "compile() defaults (Adam; the autoencoder's RMSprop): the update "
        "is then linear in the gradient, for comparisons with one process "
        "(the autoencoder's loss, summed over pixels, takes about 1e-3).",
    )
    parser.add_argument(
        "--backup-dir",
        default=None,
        help="Back up each process's training state in <dir>/process_<id> "
        "after every epoch, and resume from it.",
    )
    parser.add_argument(
        "--interrupt-at-epoch",
        type=int,
        default=None,
        help="Stop training with an error before this epoch starts.",
    )
    parser.add_argument(
        "--timing",
        action="store_true",
        help="Also time an all-reduce of the gradients' size.",
    )
    parser.add_argument(
        "--output-dir", default=os.path.join("runs", "multi_process")
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="Two processes, two steps of each model.",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.models, args.steps, args.epochs = list(MODELS), 2, 1
        args.processes = args.processes or 2
    for name in ("processes", "threads", "batch_size", "steps", "epochs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def free_port():
    """A TCP port that is free on this machine now."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def launch(args):
    """Starts `--processes` copies of this script on this machine as one
    job, waits for all of them and returns the exit code: 0, or 1 if a
    process failed or the job outlasted `--timeout` (then every process is
    stopped, so that none waits forever in a collective)."""
    os.makedirs(args.output_dir, exist_ok=True)
    address = f"localhost:{free_port()}"
    cores = sorted(os.sched_getaffinity(0)) if args.threads else []
    processes, logs = [], []
    for index in range(args.processes):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for variable in (ADDRESS_VARIABLE, COUNT_VARIABLE, ID_VARIABLE):
            env.pop(variable, None)
        if args.processes > 1:
            env[ADDRESS_VARIABLE] = address
            env[COUNT_VARIABLE] = str(args.processes)
            env[ID_VARIABLE] = str(index)
        if cores:
            first = index * args.threads
            mine = [
                cores[(first + i) % len(cores)] for i in range(args.threads)
            ]
            env[CORES_VARIABLE] = ",".join(map(str, mine))
        logs.append(os.path.join(args.output_dir, f"process_{index}.log"))
        with open(logs[-1], "w") as log:
            processes.append(
                subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__)]
                    + worker_argv(args),
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    deadline = time.monotonic() + args.timeout
    failed = None
    while failed is None and any(p.poll() is None for p in processes):
        time.sleep(0.2)
        for index, process in enumerate(processes):
            if process.poll() not in (None, 0):
                failed = f"process {index} exited with {process.returncode}"
        if time.monotonic() > deadline:
            failed = f"the job outlasted --timeout ({args.timeout:g} s)"
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()
    for index, path in enumerate(logs):
        with open(path) as file:
            lines = file.read().splitlines()
        if failed:
            print(f"--- process {index}, last lines of {path}")
            print("\n".join(lines[-40:]))
        elif index == 0:
            # Process 0's summary.
            print("\n".join(lines[-1:]))
    if failed:
        print(f"Stopped every process: {failed}.", file=sys.stderr)
        return 1
    return 0


def worker_argv(args):
    """The command line of one process of the job that `args` describe."""
    argv = ["--models", *args.models, "--architecture", args.architecture]
    for flag in ("batch_size", "steps", "epochs", "seed", "output_dir"):
        argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    for flag in ("learning_rate", "backup_dir", "interrupt_at_epoch"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    return argv + (["--timing"] if args.timing else [])


def process_layout():
    """`(num_processes, process_id)` of the job this process belongs to."""
    return (
        int(os.environ.get(COUNT_VARIABLE, "1")),
        int(os.environ.get(ID_VARIABLE, "0")),
    )


def training_data(model, args, num_processes, process_id):
    """This process's share of `--steps` global batches from the embedded
    sample, reshuffled every epoch, for `model`: shifted digits and one-hot
    labels, or for a Stacked Capsule Autoencoder digits placed on its
    canvas and integer labels."""
    x, y = mnist.load_sample("train")
    size = args.steps * args.batch_size
    if isinstance(model, keras_capsules.models.StackedCapsuleAutoencoder):
        return mnist.PaddedDigits(
            x[:size],
            np.argmax(y[:size], axis=-1),
            canvas_size=model.image_shape[0],
            batch_size=args.batch_size,
            seed=args.seed,
            num_processes=num_processes,
            process_id=process_id,
        )
    return mnist.ShiftedDigits(
        x[:size],
        y[:size],
        args.batch_size,
        seed=args.seed,
        num_processes=num_processes,
        process_id=process_id,
    )


def build(name, args):
    """The compiled network of `name` and `--architecture`, from
    `--seed`."""
    keras.utils.set_random_seed(args.seed)
    if args.architecture == "small":
        model = _common.small_model(name)
    else:
        model = _common.paper_model(name)
    if args.learning_rate is None:
        model.compile(total_steps=args.epochs * args.steps)
    else:
        model.compile(keras.optimizers.SGD(args.learning_rate))
    return model


class Interrupt(keras.callbacks.Callback):
    """Stops `fit` before epoch `epoch`, as a killed job would stop."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise KeyboardInterrupt(f"interrupted before epoch {epoch}")


class StepTimes(keras.callbacks.Callback):
    """The wall time at the start of training and after every step."""

    def on_train_begin(self, logs=None):
        self.times = [time.perf_counter()]

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter())


def train(name, args, num_processes, process_id, weights=None):
    """Trains `name` on this process's share, from `weights` if given;
    returns the model and its report: the weights before and after, the
    losses, img/s."""
    model = build(name, args)
    if weights is not None:
        model.set_weights(weights)
    initial = [np.asarray(w) for w in model.get_weights()]
    data = training_data(model, args, num_processes, process_id)
    times = StepTimes()
    callbacks = [times, keras_capsules.callbacks.DatasetEpoch(data)]
    if args.backup_dir:
        directory = os.path.join(args.backup_dir, f"process_{process_id}")
        callbacks.insert(0, keras.callbacks.BackupAndRestore(directory))
    if args.interrupt_at_epoch is not None:
        callbacks.append(Interrupt(args.interrupt_at_epoch))
    report = {"initial": initial, "interrupted": False}
    try:
        history = model.fit(
            data,
            epochs=args.epochs,
            shuffle=False,
            callbacks=callbacks,
            verbose=2 if process_id == 0 else 0,
        )
        report["loss"] = np.asarray(history.history["loss"])
    except KeyboardInterrupt:
        report["interrupted"] = True
    report["final"] = [np.asarray(w) for w in model.get_weights()]
    # Steps after the first epoch, which compiles the train step.
    step_times = np.diff(times.times)[args.steps :]
    if len(step_times):
        report["images_per_second"] = args.batch_size / np.median(step_times)
        report["step_seconds"] = float(np.median(step_times))
    return model, report


def all_reduce_seconds(num_values, repeats=20):
    """The median time of one all-reduce (a sum over the processes) of
    `num_values` float32 values, the size of a model's gradients."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("batch",))
    local = np.ones((jax.local_device_count(), num_values), "float32")
    values = jax.make_array_from_process_local_data(
        NamedSharding(mesh, PartitionSpec("batch")), local
    )
    total = jax.jit(
        lambda x: jnp.sum(x, axis=0),
        out_shardings=NamedSharding(mesh, PartitionSpec()),
    )
    total(values).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        total(values).block_until_ready()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def work(args):
    """One process of the job: trains every model of `--models`."""
    cores = os.environ.get(CORES_VARIABLE)
    if cores:
        # Before JAX's CPU client exists: XLA sizes its thread pool by the
        # cores this process may run on.
        os.sched_setaffinity(0, [int(c) for c in cores.split(",")])
    num_processes, process_id = process_layout()
    if num_processes > 1:
        # Before any array exists; reads the KERAS_DISTRIBUTION_* variables.
        keras.distribution.initialize()
        keras.distribution.set_distribution(
            keras.distribution.DataParallel(auto_shard_dataset=False)
        )
    import jax

    if jax.process_count() != num_processes:
        print(
            f"JAX sees {jax.process_count()} processes, the job "
            f"{num_processes}: initialize() came too late.",
            file=sys.stderr,
        )
        return 1
    os.makedirs(args.output_dir, exist_ok=True)
    arrays = {}
    summary = {
        "processes": num_processes,
        "cores_per_process": len(os.sched_getaffinity(0)),
        "machine": presets.describe_hardware(),
        "backend": keras.backend.backend(),
        "jax": jax.__version__,
        "keras": keras.__version__,
        "architecture": args.architecture,
        "batch_size": args.batch_size,
        "models": {},
    }
    for name in args.models:
        model, report = train(name, args, num_processes, process_id)
        for key in ("initial", "final"):
            for index, value in enumerate(report[key]):
                arrays[f"{name}/{key}/{index}"] = value
        if "loss" in report:
            arrays[f"{name}/loss"] = report["loss"]
        arrays[f"{name}/interrupted"] = np.asarray(report["interrupted"])
        entry = {
            key: report[key]
            for key in ("images_per_second", "step_seconds", "interrupted")
            if key in report
        }
        entry["parameters"] = int(model.count_params())
        if args.timing:
            entry["all_reduce_seconds"] = all_reduce_seconds(
                sum(int(np.prod(w.shape)) for w in model.trainable_weights)
            )
        summary["models"][name] = entry
        if process_id == 0 and not report["interrupted"]:
            # Only one process writes; `save_to_preset` builds its copy
            # outside the distribution, so the others need not take part.
            model.save_to_preset(
                os.path.join(args.output_dir, f"{name}_preset")
            )
    np.savez(
        os.path.join(args.output_dir, f"process_{process_id}.npz"), **arrays
    )
    if process_id == 0:
        print(json.dumps(summary))
    return 0


def main(argv=None):
    args = parse_args(argv)
    if keras.backend.backend() != "jax":
        print(
            "Multi-process training is not supported on the "
            f"{keras.backend.backend()} backend: Keras 3's multi-process "
            "engine is keras.distribution on JAX. Set KERAS_BACKEND=jax.",
            file=sys.stderr,
        )
        return 1
    if args.processes is not None:
        return launch(args)
    return work(args)


if __name__ == "__main__":
    sys.exit(main())
