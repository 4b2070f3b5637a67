"""One measurement point of an official TensorFlow 1 capsule code.

`benchmarks.run --official-checkout PATH` times the package's training
and inference steps against the codes it mirrors, in the same run, on
the same batch: `capsnet` against Sarasra/models `research/capsules`
(Sabour et al. 2017) and `matrix_capsnet` against google-research
`capsule_em` (Hinton et al. 2018). Their code is not part of the
package: this script imports a checkout given by path, in an interpreter
that has TensorFlow 1.15 (`--official-python`, Python 3.7), and builds
the graph their training script builds, with their defaults:

- `capsnet`: `experiment.default_hparams()` (3 routing iterations, the
  reconstruction network, Adam with the exponential decay) and
  `CapsuleModel(hparams).multi_gpu([features], 1)`, one tower; the
  training step runs its `train_op`, the inference step its logits;
- `matrix_capsnet`: the flags of `capsule_em/experiment.py` for the
  point's architecture (`em_flags`: A, B, C, D of the `--preset`, the
  routing iterations, the batch; smallNORB's spread loss and Adam, its
  defaults) and `model.multi_gpu_model([features])`, one tower; the
  training step runs `result["train"]`, the inference step
  `result["logits"]`.

The batch is the one the package's point trains on (`benchmarks.models.
batch`), written by the parent to `spec["inputs_path"]` and fed through
placeholders at every step, as `train_on_batch` converts its arrays. The
row has the keys of a `benchmarks.runner` row: the first step's seconds
(graph optimisation included), the median of the timed steps, images per
second, and the process's peak resident memory before the graph and
after the steps.

Two shims, both recorded in the row, let the TensorFlow 1 code run here:
`xrange` (the codes were written for Python 2 as well), and, on a machine
without a GPU, `tf.nn.conv2d` in `NCHW` layout (the layout of both codes,
for which TensorFlow 1 has no CPU gradient kernel) computed as a transpose to
`NHWC`, the convolution and a transpose back: the same arithmetic plus
two transposes per convolution.

Usage (`benchmarks.runner` runs it; Python 3.7 with TensorFlow 1.15):
    python benchmarks/official_codes.py SPEC_JSON OUT_PATH

Checkouts: `git clone https://github.com/Sarasra/models` (then
`--official-checkout models/research/capsules`) and google-research's
`capsule_em/` folder under some folder F (`--official-checkout F`).
"""

from __future__ import division
from __future__ import print_function

import json
import os
import platform
import sys
import traceback

import numpy as np

try:
    from benchmarks._process import cpu_model
    from benchmarks._process import peak_rss_mib
    from benchmarks._process import predict_timing
    from benchmarks._process import train_timing
except ImportError:  # Run as a script: this folder is on the path.
    from _process import cpu_model
    from _process import peak_rss_mib
    from _process import predict_timing
    from _process import train_timing

# The flags of google-research capsule_em's experiment.py for the matrix
# network of the paper, whatever their defaults: a 5x5 stride-2
# convolution of A channels, B primary capsule types, 3x3 capsule
# convolutions of C and D types at strides 2 and 1, 4x4 poses, the
# class capsules, smallNORB's spread loss, Adam. `em_flags` adds A, B, C,
# D, the batch and the routing iterations.
EM_FLAGS = (
    "--data_set=norb",
    "--kernel_size=5",
    "--stride_1=2",
    "--extra_caps=2",
    "--caps_strides=2,1",
    "--caps_kernels=3,3",
    "--num_primary_atoms=16",
    "--use_caps=true",
    "--use_em=true",
    "--adam=true",
    "--num_gpus=1",
)


def em_flags(architecture, batch_size, routing_iterations):
    """The command line of capsule_em's flags for the network `{"A": ...,
    "B": ..., "C": ..., "D": ...}` (a `MatrixCapsNet` preset's config)."""
    return list(EM_FLAGS) + [
        "--num_start_conv=%d" % architecture["A"],
        "--num_prime_capsules=%d" % architecture["B"],
        "--caps_dims=%d,%d" % (architecture["C"], architecture["D"]),
        "--batch_size=%d" % batch_size,
        "--routing_iteration=%d" % routing_iterations,
    ]


def install_shims(tf, gpu):
    """`xrange`, and `NCHW` convolutions through `NHWC` without a GPU
    (`gpu` False). Returns the names of the shims installed."""
    import builtins

    shims = []
    if not hasattr(builtins, "xrange"):
        builtins.xrange = range
        shims.append("xrange")
    if not gpu:
        conv2d = tf.nn.conv2d

        def conv2d_via_nhwc(
            input,
            filter=None,
            strides=None,
            padding=None,
            use_cudnn_on_gpu=True,
            data_format="NHWC",
            dilations=(1, 1, 1, 1),
            name=None,
            filters=None,
        ):
            kernel = filters if filter is None else filter
            if data_format != "NCHW":
                return conv2d(
                    input,
                    kernel,
                    strides,
                    padding,
                    use_cudnn_on_gpu=use_cudnn_on_gpu,
                    data_format=data_format,
                    dilations=dilations,
                    name=name,
                )
            to_nhwc = [0, 2, 3, 1]
            output = conv2d(
                tf.transpose(input, to_nhwc),
                kernel,
                [strides[i] for i in to_nhwc],
                padding,
                use_cudnn_on_gpu=use_cudnn_on_gpu,
                data_format="NHWC",
                dilations=[dilations[i] for i in to_nhwc],
                name=name,
            )
            return tf.transpose(output, [0, 3, 1, 2])

        tf.nn.conv2d = conv2d_via_nhwc
        shims.append("conv2d NCHW via NHWC (no GPU)")
    return shims


def image_features(tf, x, y):
    """The features both codes read, on placeholders: `images` in their
    `NCHW` layout, one-hot `labels`, the image size and the number of
    classes; and the feed that gives them the batch `(x, y)` (NHWC)."""
    batch_size, height, _, depth = x.shape
    images = tf.placeholder(tf.float32, (batch_size, depth, height, height))
    labels = tf.placeholder(tf.float32, y.shape)
    features = {
        "images": images,
        "labels": labels,
        "height": height,
        "depth": depth,
        "num_classes": y.shape[1],
    }
    feed = {images: np.transpose(x, (0, 3, 1, 2)), labels: y}
    return features, feed


def build_capsnet(tf, checkout, x, y):
    """Sarasra/models research/capsules (`checkout` is that folder): the
    train op, the logits and the placeholders of its features."""
    sys.path.insert(0, checkout)
    import experiment
    from models import capsule_model

    features, feed = image_features(tf, x, y)
    recons_label = tf.placeholder(tf.int32, (len(x),))
    features.update(
        recons_image=features["images"],
        recons_label=recons_label,
        num_targets=1,
    )
    feed[recons_label] = np.argmax(y, axis=1).astype("int32")
    model = capsule_model.CapsuleModel(experiment.default_hparams())
    result, inferred = model.multi_gpu([features], 1)
    return result.train_op, inferred[0].logits, feed


def build_matrix_capsnet(tf, checkout, x, y, architecture, routing_iterations):
    """google-research capsule_em (`checkout` holds `capsule_em/`): the
    train op, the logits and the placeholders of its features."""
    sys.path.insert(0, checkout)
    from capsule_em import experiment
    from capsule_em import model

    experiment.FLAGS(
        ["official_codes"] + em_flags(architecture, len(x), routing_iterations)
    )
    features, feed = image_features(tf, x, y)
    result = model.multi_gpu_model([features])
    return result["train"], result["logits"], feed


def measure(spec):
    # Importing TensorFlow 2 (in the parent) sets TF2_BEHAVIOR=1, which
    # would turn TensorFlow 1's graph code into TensorFlow 2's; TensorFlow
    # 1 aborts on the XLA flags of today (and compiles nothing with XLA
    # here).
    os.environ.pop("TF2_BEHAVIOR", None)
    xla_flags = os.environ.pop("XLA_FLAGS", "")
    import tensorflow as tf

    gpu = tf.test.is_gpu_available()
    shims = install_shims(tf, gpu)
    # As `benchmarks.runner`: the interpreter and the framework, before the
    # model.
    baseline_rss = peak_rss_mib()
    data = np.load(spec["inputs_path"])
    x, y = data["x"], data["y"]
    row = dict(spec)
    with tf.Graph().as_default():
        tf.set_random_seed(spec["seed"])
        if spec["model"] == "capsnet":
            train_op, logits, feed = build_capsnet(
                tf, spec["official_checkout"], x, y
            )
        elif spec["model"] == "matrix_capsnet":
            train_op, logits, feed = build_matrix_capsnet(
                tf,
                spec["official_checkout"],
                x,
                y,
                spec["official_architecture"],
                spec["routing_iterations"],
            )
        else:
            raise ValueError(
                "No official code for model=%r: capsnet or matrix_capsnet."
                % spec["model"]
            )
        row["num_params"] = int(
            sum(np.prod(v.shape.as_list()) for v in tf.trainable_variables())
        )
        config = tf.ConfigProto(allow_soft_placement=True)
        with tf.Session(config=config) as session:
            session.run(
                tf.group(
                    tf.global_variables_initializer(),
                    tf.local_variables_initializer(),
                )
            )
            row.update(
                train_timing(
                    lambda: session.run(train_op, feed),
                    len(x),
                    spec["steps"],
                    spec["warmup"],
                )
            )
            row.update(
                predict_timing(
                    lambda: session.run(logits, feed),
                    len(x),
                    spec["steps"],
                    spec["warmup"],
                )
            )
    row["peak_rss_mib"] = peak_rss_mib()
    row["baseline_rss_mib"] = baseline_rss
    row["rss_growth_mib"] = row["peak_rss_mib"] - baseline_rss
    row["device_peak_mib"] = None
    row["jit_compile"] = False
    row["shims"] = shims
    # Not "environment", which `benchmarks.runner` keeps for the package's.
    row["official_environment"] = {
        "backend": "tensorflow 1 (graph)",
        "device": "gpu" if gpu else "cpu",
        "cpu": cpu_model(),
        "framework": tf.__version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "xla_flags_ignored": xla_flags,
        "tf_cpu_allocator_use_bfc": os.environ.get(
            "TF_CPU_ALLOCATOR_USE_BFC", ""
        ),
    }
    return row


def main(argv):
    spec, out_path = json.loads(argv[1]), argv[2]
    try:
        row = measure(spec)
        status = 0
    except Exception as error:  # Recorded, so that the run goes on.
        row = dict(spec)
        row["error"] = ("%s: %s" % (type(error).__name__, error))[:2000]
        row["traceback"] = traceback.format_exc()[-4000:]
        status = 1
    with open(out_path, "w") as f:
        json.dump(row, f)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
