"""Seconds per training step of the package's SCAE, timed as
`step_time_official.py` times the official code.

`StackedCapsuleAutoencoder.from_preset("scae_mnist")` with `compile()`'s
defaults (XLA on TensorFlow and JAX), `--steps` timed `train_on_batch`
calls on one fixed batch of random 40x40 canvases (with labels, for the
probes) after `--warmup` untimed ones (the first compiles); with `--fit`,
the steps of one `model.fit` on that batch repeated (the path a user
takes; `--warmup` at least 1). With
`--threads 1` TensorFlow and XLA use one thread (set before Keras is
imported); pin the process as the official one (`taskset -c 0`). Also
times a float32 matmul of 2048x2048 matrices with the same backend and
threads (the machine's matmul rate, GFLOP/s). With `--flops` (JAX) it
adds XLA's count of the arithmetic of one step (the loss and its
gradient, compiled as one function), and with `--profile N` (JAX) the
compiled operations that took longest in N calls of that function, from a
`jax.profiler` trace. Prints one JSON line.

    KERAS_BACKEND=tensorflow taskset -c 0 python step_time_ours.py \\
        --threads 1
"""

import argparse
import os
import sys
import time

import step_timing


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    step_timing.add_arguments(parser)
    parser.add_argument("--flops", action="store_true")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        help="JAX: profile this many loss-and-gradient calls and list the "
        "compiled operations that took longest.",
    )
    parser.add_argument(
        "--fit",
        action="store_true",
        help="Time the steps of one model.fit on arrays, not train_on_batch.",
    )
    return parser.parse_args()


def limit_threads(threads):
    """One-thread settings for TensorFlow, XLA, PyTorch and NumPy."""
    if threads is None:
        return
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(threads)
    os.environ["TF_NUM_INTEROP_THREADS"] = str(threads)
    if threads == 1:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + " --xla_cpu_multi_thread_eigen=false"
            + " intra_op_parallelism_threads=1"
        )


def matmul_rate(ops, size=2048, repeats=5):
    a = ops.ones((size, size))
    b = ops.ones((size, size))
    ops.convert_to_numpy(ops.matmul(a, b))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        ops.convert_to_numpy(ops.matmul(a, b))
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def fit_steps(model, images, labels, warmup, steps):
    """The seconds of `steps` training steps inside one `model.fit` on
    arrays (the batch repeated), after `warmup` steps: the time between
    the ends of consecutive batches."""
    import keras
    import numpy as np

    ends = []

    class Ends(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append(time.perf_counter())

    repeats = warmup + steps
    model.fit(
        np.concatenate([images] * repeats),
        np.concatenate([labels] * repeats),
        batch_size=len(images),
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[Ends()],
    )
    return list(np.diff(ends[warmup - 1 :]))


def loss_and_gradient(model, images, labels):
    """The jitted loss and its gradient (JAX), and its arguments."""
    import jax

    def loss(trainable, non_trainable):
        outputs, _ = model.stateless_call(
            trainable, non_trainable, images, training=True
        )
        return model.loss(labels, outputs)

    arguments = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
    )
    return jax.jit(jax.value_and_grad(loss)), arguments


def step_gflop(model, images, labels):
    """XLA's floating-point operations of the loss and its gradient (JAX)."""
    step, arguments = loss_and_gradient(model, images, labels)
    cost = step.lower(*arguments).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0]
    return cost["flops"] / 1e9


def step_profile(model, images, labels, steps, top=20):
    """The `top` compiled operations that took longest in `steps` calls of
    the loss and its gradient (JAX, `jax.profiler`): milliseconds a step,
    and the Keras operation each came from (XLA's `op_name`)."""
    import gzip
    import json
    import re
    import tempfile
    from collections import Counter

    import jax

    step, arguments = loss_and_gradient(model, images, labels)
    sources = {}
    for line in step.lower(*arguments).compile().as_text().splitlines():
        match = re.match(r"\s*(?:ROOT )?%(\S+) = ", line)
        if match:
            source = re.search(r'op_name="([^"]+)"', line)
            sources[match.group(1)] = source.group(1) if source else ""
    jax.block_until_ready(step(*arguments))
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            for _ in range(steps):
                jax.block_until_ready(step(*arguments))
        (path,) = [
            os.path.join(root, name)
            for root, _, names in os.walk(folder)
            for name in names
            if name.endswith(".trace.json.gz")
        ]
        with gzip.open(path) as file:
            events = json.load(file)["traceEvents"]
    micros = Counter()
    for event in events:
        # The compiled operations' own events (the executor's are wider).
        if event.get("ph") == "X" and event.get("name") in sources:
            micros[event["name"]] += event["dur"]
    return [
        {"op": name, "ms": round(us / steps / 1e3, 1), "source": sources[name]}
        for name, us in micros.most_common(top)
    ]


def main():
    args = parse_args()
    limit_threads(args.threads)
    import keras
    import numpy as np
    from keras import ops

    if args.threads is not None and keras.backend.backend() == "torch":
        import torch

        torch.set_num_threads(args.threads)
    # The package of the checkout this script is in (a worktree of another
    # commit times its own package), before the installed one.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    import keras_capsules

    rng = np.random.default_rng(0)
    images = rng.uniform(size=(args.batch_size, 40, 40, 1)).astype("float32")
    labels = rng.integers(0, 10, size=args.batch_size)
    keras.utils.set_random_seed(0)
    model = keras_capsules.models.StackedCapsuleAutoencoder.from_preset(
        "scae_mnist"
    )
    model.compile()
    if args.fit:
        seconds = fit_steps(model, images, labels, args.warmup, args.steps)
    else:
        seconds = step_timing.time_steps(
            lambda: model.train_on_batch(images, labels),
            args.warmup,
            args.steps,
        )
    record = step_timing.record(
        "ours",
        args,
        seconds,
        backend=keras.backend.backend(),
        path="fit" if args.fit else "train_on_batch",
        matmul_gflops=round(matmul_rate(ops), 1),
    )
    if args.flops:
        gflop = step_gflop(model, images, labels)
        record["xla_gflop_per_step"] = round(gflop, 2)
    if args.profile:
        record["profile"] = step_profile(model, images, labels, args.profile)
    step_timing.print_record(record)


if __name__ == "__main__":
    main()
