"""Our side of the SCAE gradient and optimizer-step parity check.

Builds `StackedCapsuleAutoencoder.from_preset("scae_mnist")` with the
presence noise off (`noise_scale=0.0`) and writes, under `--out`:

- `batches.npz`: `images` (steps, 128, 40, 40, 1) float32 canvases (28x28
  training digits at random offsets on a 40x40 canvas, the official
  `pad_and_shift`) and `labels` (steps, 128) int64, from `--seed`;
- `init_weights.npz`: the initial weights, keyed by our weight paths
  (written by the first run, read by every later one, so that both
  backends and the official side start from the same numbers);
- `ours_<backend>.npz`: on batch 0, the loss, its terms and the gradient
  of every trainable weight (`training=True`); then the loss and terms of
  each of `--steps` steps of `train_on_batch` with `compile()` defaults
  (one batch each, in order), and the weights after them.

Run it once per backend, single-threaded:

    KERAS_BACKEND=jax python parity_export.py --out /tmp/scae_parity
    KERAS_BACKEND=tensorflow python parity_export.py --out /tmp/scae_parity
"""

import argparse
import os
import time

import numpy as np

# One thread everywhere (set before the backends are imported).
for _name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

from keras_capsules.datasets.mnist import read_idx  # noqa: E402
from keras_capsules.losses import StackedCapsuleAutoencoderLoss  # noqa: E402
from keras_capsules.models import StackedCapsuleAutoencoder  # noqa: E402

BATCH = 128
CANVAS = 40
DIGIT = 28


def make_batches(mnist_dir, steps, seed):
    """`steps` batches of `BATCH` training digits on the canvas."""
    images = read_idx(os.path.join(mnist_dir, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(mnist_dir, "train-labels-idx1-ubyte.gz"))
    rng = np.random.default_rng(seed)
    index = rng.choice(len(images), size=steps * BATCH, replace=False)
    offsets = rng.integers(0, CANVAS - DIGIT + 1, size=(steps * BATCH, 2))
    canvas = np.zeros((steps * BATCH, CANVAS, CANVAS, 1), np.float32)
    for n, (i, (dy, dx)) in enumerate(zip(index, offsets)):
        canvas[n, dy : dy + DIGIT, dx : dx + DIGIT, 0] = images[i] / 255.0
    return (
        canvas.reshape(steps, BATCH, CANVAS, CANVAS, 1),
        labels[index].astype(np.int64).reshape(steps, BATCH),
    )


def batch_zero_tensorflow(model, loss_fn, x, y):
    import tensorflow as tf

    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        outputs = model(x, training=True)
        loss, terms = loss_fn.terms(y, outputs)
    grads = tape.gradient(loss, [v.value for v in variables])
    return loss, terms, grads


def batch_zero_jax(model, loss_fn, x, y):
    import jax

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def objective(values):
        outputs, _ = model.stateless_call(
            values, non_trainable, x, training=True
        )
        return loss_fn.terms(y, outputs)

    step = jax.jit(jax.value_and_grad(objective, has_aux=True))
    (loss, terms), grads = step(trainable)
    return loss, terms, grads


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="/tmp/scae_parity")
    parser.add_argument("--mnist", default="/work/shared/data/mnist")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also write the weights after every step (trace_<backend>.npz)",
    )
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    backend = keras.backend.backend()
    start = time.time()

    batches_path = os.path.join(args.out, "batches.npz")
    if os.path.exists(batches_path):
        data = np.load(batches_path)
        images, labels = data["images"], data["labels"]
        if len(images) < args.steps:
            raise SystemExit(f"{batches_path} holds fewer than --steps")
    else:
        images, labels = make_batches(args.mnist, args.steps, args.seed)
        np.savez(batches_path, images=images, labels=labels)

    keras.utils.set_random_seed(args.seed)
    model = StackedCapsuleAutoencoder.from_preset(
        "scae_mnist", noise_scale=0.0, seed=args.seed
    )
    weights_path = os.path.join(args.out, "init_weights.npz")
    if os.path.exists(weights_path):
        init = np.load(weights_path)
        for variable in model.weights:
            variable.assign(init[variable.path])
        print(f"initial weights read from {weights_path}")
    else:
        np.savez(
            weights_path,
            **{v.path: np.asarray(v.numpy()) for v in model.weights},
        )
        print(f"initial weights written to {weights_path}")
    init = {v.path: np.asarray(v.numpy()) for v in model.weights}

    # Loss, terms and gradients on batch 0.
    loss_fn = StackedCapsuleAutoencoderLoss()
    x0, y0 = images[0], labels[0]
    fn = batch_zero_jax if backend == "jax" else batch_zero_tensorflow
    loss, terms, grads = fn(model, loss_fn, x0, y0)
    result = {"loss": np.asarray(loss, np.float64)}
    for name, value in terms.items():
        result[f"term/{name}"] = np.asarray(value, np.float64)
    for variable, grad in zip(model.trainable_variables, grads):
        if grad is None:  # TensorFlow's tape: the loss does not read it.
            result[f"nograd/{variable.path}"] = np.array(True)
            grad = np.zeros(variable.shape, "float32")
        result[f"grad/{variable.path}"] = np.asarray(grad)
    grad_time = time.time() - start

    # `--steps` optimizer steps with the compile() defaults.
    model.compile()
    step_logs = []
    trace = {v.path: [] for v in model.weights} if args.trace else None
    for i in range(args.steps):
        logs = model.train_on_batch(images[i], labels[i], return_dict=True)
        step_logs.append(logs)
        print(f"step {i:2d} loss {logs['loss']:.6f}", flush=True)
        if trace is not None:
            for variable in model.weights:
                trace[variable.path].append(np.asarray(variable.numpy()))
    if trace is not None:
        np.savez(
            os.path.join(args.out, f"trace_{backend}.npz"),
            **{path: np.stack(values) for path, values in trace.items()},
        )
    result["step_loss"] = np.array([logs["loss"] for logs in step_logs])
    for name in terms:
        result[f"step_term/{name}"] = np.array(
            [logs[name] for logs in step_logs]
        )
    for variable in model.weights:
        result[f"final/{variable.path}"] = np.asarray(variable.numpy())
        result[f"init/{variable.path}"] = init[variable.path]
    result["optimizer"] = np.array(repr(model.optimizer.get_config()))
    out = os.path.join(args.out, f"ours_{backend}.npz")
    np.savez(out, **result)
    print(
        f"{backend}: loss {float(loss):.6f}; batch-0 gradients "
        f"{grad_time:.1f} s, total {time.time() - start:.1f} s -> {out}"
    )


if __name__ == "__main__":
    main()
