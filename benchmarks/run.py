"""Speed and memory of keras_capsules, side by side with a naive EM baseline.

One entry point for every benchmark. Each measurement point (model,
implementation, batch size, routing iterations) runs in a fresh Python
subprocess, because the peak resident memory of a process is a high-water
mark that only grows; the parent collects one JSON row per point. For
every point it reports:

- training images per second: the median of `--steps` timed
  `train_on_batch` calls on one fixed batch, after `--warmup` untimed ones
  (the first of which traces and compiles the step);
- inference images per second: the same for `predict_on_batch`;
- the compile time (the first training step, and the first prediction);
- the peak resident memory of the process (MiB), its growth from just
  before the model was built, and the accelerator's peak (None on CPU);
- the number of parameters, the backend, device, versions and
  `jit_compile`.

Models (`--model`):

- `capsnet`: CapsNet (Sabour et al. 2017) with its decoder, 28x28 MNIST
  images, batch 100 by default;
- `efficient_capsnet`: EfficientCapsNet (Mazzia et al. 2021), the MNIST
  network with its decoder, 28x28 images, batch 100 by default (it has no
  routing iterations: `--iterations` only labels its points);
- `matrix_capsnet`: MatrixCapsNet (Hinton et al. 2018) on 32x32 images,
  `--preset full` (A=B=C=D=32) or `small` (A=64, B=8, C=D=16);
- `em_conv_caps`: the single `EMConvCaps` layer as ConvCaps1 of the paper,
  14x14 input capsules to a 3x3 stride-2 window, 32 types to 32 (`full`)
  or 8 to 16 (`small`);
- `dense_caps`: the single `DenseCaps` layer as DigitCaps, 1152 8D
  capsules to 10 16D capsules.

The layers are wrapped in small functional models (the flattened outputs
against a random target with a mean squared error for `em_conv_caps`;
capsule lengths against one-hot labels with the margin loss for
`dense_caps`) so that `train_on_batch` and `predict_on_batch` apply.

For `matrix_capsnet` and `em_conv_caps`, `--impl both` (the default) also
measures `benchmarks/naive_em.py`: the same EM layer written as the
research ports write it (windows gathered by index, transforms tiled over
the batch, broadcast matmul, routing normalised within each window), with
the same weights and inputs. Points of the two implementations alternate,
so drift on a noisy machine hits both, and every (batch, iterations) pair
with both gets the ratios ours/naive: step time and throughput, training
and inference, and peak memory. A point that fails (an exception, a
non-zero exit, a kill for memory, `--timeout`) is recorded with its error
and the run goes on.

`--baseline-model` measures a second model in the same run, its points
alternating with those of `--model` at every batch size, with the ratios
of `--model` to it: `--model efficient_capsnet --baseline-model capsnet`.

Lists of batch sizes and iterations give scaling curves;
`python -m benchmarks.plot` draws them from the JSON and fits straight
lines to them. `--check` runs a quick self-check instead: the naive layer
equals `EMConvCaps` where windows do not overlap, and both models give
finite outputs of equal shapes and a finite training loss.

Usage:
    KERAS_BACKEND=jax python -m benchmarks.run --model matrix_capsnet \\
        --preset full --batch 32 --iterations 3 --json matrix_full.json
    python -m benchmarks.run --model em_conv_caps --batch 1,2,4,8,16,32,64 \\
        --json em_batch.json
    python -m benchmarks.run --model em_conv_caps --batch 32 \\
        --iterations 1,2,3,4,5 --json em_iterations.json
    python -m benchmarks.run --model capsnet --batch 100 --no-jit
    python -m benchmarks.run --model efficient_capsnet \\
        --baseline-model capsnet --batch 100
    python -m benchmarks.run --model dense_caps --batch 100
    python -m benchmarks.run --check --preset small
    python -m benchmarks.plot em_batch.json --out em_batch.png
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback

import keras
import numpy as np

# Runnable both as `python -m benchmarks.run` and as a file.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import keras_capsules  # noqa: E402
from benchmarks import common  # noqa: E402
from benchmarks import naive_em  # noqa: E402

MODELS = (
    "capsnet",
    "efficient_capsnet",
    "matrix_capsnet",
    "em_conv_caps",
    "dense_caps",
)
NAIVE_MODELS = ("matrix_capsnet", "em_conv_caps")
DEFAULT_BATCH = {
    "capsnet": 100,
    "efficient_capsnet": 100,
    "matrix_capsnet": 32,
    "em_conv_caps": 32,
    "dense_caps": 100,
}
DEFAULT_IMAGE_SIZE = {
    "capsnet": 28,
    "efficient_capsnet": 28,
    "matrix_capsnet": 32,
}
# ConvCaps1 of the paper: the 14x14 grid of primary capsules of a 32x32
# image, B input types, C output types, 3x3 window, stride 2.
EM_CONV_CAPS_CONFIGS = {
    "full": {"grid_size": 14, "num_in": 32, "num_out": 32},
    "small": {"grid_size": 14, "num_in": 8, "num_out": 16},
}
# DigitCaps of CapsNet: 6 * 6 * 32 primary capsules of 8D to 10 of 16D.
DENSE_CAPS_SHAPE = {"num_in": 1152, "dim_in": 8, "num_out": 10, "dim": 16}
MATRIX_NUM_CLASSES = 5
CAPSNET_NUM_CLASSES = 10
# Measured quantities compared between the two implementations: (row key,
# ratio name). Times and memory: below 1 means ours is faster or smaller;
# throughputs: above 1 means ours is faster.
RATIO_KEYS = (
    ("step_seconds", "train_time_ratio"),
    ("train_images_per_second", "train_throughput_ratio"),
    ("predict_seconds", "inference_time_ratio"),
    ("inference_images_per_second", "inference_throughput_ratio"),
    ("compile_seconds", "compile_time_ratio"),
    ("peak_rss_mib", "peak_rss_ratio"),
    ("rss_growth_mib", "rss_growth_ratio"),
    ("device_peak_mib", "device_peak_ratio"),
)


# Arguments


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", choices=MODELS, default="matrix_capsnet")
    parser.add_argument(
        "--baseline-model",
        choices=MODELS,
        default=None,
        help="A second model measured in the same run, alternating with "
        "--model, and the ratios of --model to it.",
    )
    parser.add_argument(
        "--preset",
        "--config",
        dest="preset",
        choices=sorted(common.MATRIX_CAPSNET_CONFIGS),
        default="full",
        help="Size of matrix_capsnet and em_conv_caps (ignored otherwise).",
    )
    parser.add_argument(
        "--batch",
        type=common.int_list,
        default=None,
        help="Batch size, or comma-separated sizes. Defaults to 100 for "
        "capsnet and dense_caps, 32 otherwise.",
    )
    parser.add_argument(
        "--iterations",
        type=common.int_list,
        default=[3],
        help="Routing iterations, or a comma-separated list. Defaults to 3.",
    )
    parser.add_argument(
        "--jit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="jit_compile of the compiled steps (XLA on TensorFlow and "
        "JAX, torch.compile on PyTorch). Defaults to on for TensorFlow and "
        "JAX, off for PyTorch.",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=10,
        help="Timed steps per point; the median is reported. Defaults to 10.",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="Untimed steps first, the compiling one included. Defaults to 2.",
    )
    parser.add_argument(
        "--impl",
        choices=("ours", "naive", "both"),
        default=None,
        help="Implementation(s) to measure; naive exists for "
        "matrix_capsnet and em_conv_caps. Defaults to both for those, "
        "ours otherwise.",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="Image height and width of capsnet (default 28) and "
        "matrix_capsnet (default 32).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="Seconds allowed to each point. Defaults to 3600.",
    )
    parser.add_argument(
        "--json", default=None, metavar="PATH", help="Write the results here."
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="Run the naive-versus-ours self-check instead (tiny shapes).",
    )
    # Internal: one measurement point, run by the parent in a subprocess.
    parser.add_argument("--_point", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        parser.error(
            "--steps and --warmup must be at least 1 (the first warm-up "
            f"step compiles). Received: --steps={args.steps} "
            f"--warmup={args.warmup}"
        )
    if args.impl is None:
        args.impl = "both" if args.model in NAIVE_MODELS else "ours"
    if args.impl != "ours" and args.model not in NAIVE_MODELS:
        parser.error(
            f"--impl {args.impl}: the naive baseline exists only for "
            f"{', '.join(NAIVE_MODELS)}. Received: --model={args.model}"
        )
    if args.baseline_model is not None and (
        args.impl != "ours" or args.baseline_model == args.model
    ):
        parser.error(
            "--baseline-model needs --impl ours and another model than "
            f"--model. Received: --baseline-model={args.baseline_model}"
        )
    if args.batch is None:
        args.batch = [DEFAULT_BATCH[args.model]]
    if args.image_size is None:
        args.image_size = DEFAULT_IMAGE_SIZE.get(args.model)
    return args


def _points(args):
    """Every measurement point; ours and naive (or the baseline model)
    alternate at each pair. `variant` names a point in the ratios: its
    impl, or the baseline model's name."""
    variants = [
        (args.model, impl)
        for impl in (("ours", "naive") if args.impl == "both" else (args.impl,))
    ]
    if args.baseline_model is not None:
        variants.append((args.baseline_model, "ours"))
    return [
        {
            "model": model,
            "variant": impl if model == args.model else model,
            "config": args.preset if model in NAIVE_MODELS else None,
            "impl": impl,
            "batch_size": batch_size,
            "routing_iterations": iterations,
            "image_size": (
                args.image_size
                if model == args.model
                else DEFAULT_IMAGE_SIZE.get(model)
            ),
            "jit": args.jit,
            "steps": args.steps,
            "warmup": args.warmup,
            "seed": args.seed,
        }
        for iterations in args.iterations
        for batch_size in args.batch
        for model, impl in variants
    ]


# Models and data (run inside the point's process)


def _one_hot(rng, batch_size, num_classes):
    labels = rng.integers(0, num_classes, size=batch_size)
    return np.eye(num_classes, dtype="float32")[labels]


def _matrix_capsnet_arguments(spec):
    size = spec["image_size"]
    return {
        "input_shape": (size, size, 1),
        "num_classes": MATRIX_NUM_CLASSES,
        "routing_iterations": spec["routing_iterations"],
        **common.MATRIX_CAPSNET_CONFIGS[spec["config"]],
    }


def _build_matrix_capsnet(spec, jit_compile, rng):
    arguments = _matrix_capsnet_arguments(spec)
    model = keras_capsules.models.MatrixCapsNet(**arguments)
    if spec["impl"] == "naive":
        # Built from the same seed as the `ours` point, so both start from
        # the same weights.
        naive = naive_em.naive_matrix_capsnet(**arguments)
        naive_em.copy_weights(model, naive)
        model = naive
        naive_em.compile_like_matrix_capsnet(model, jit_compile=jit_compile)
    else:
        model.compile(jit_compile=jit_compile)
    size = spec["image_size"]
    batch_size = spec["batch_size"]
    x = rng.standard_normal((batch_size, size, size, 1)).astype("float32")
    y = _one_hot(rng, batch_size, MATRIX_NUM_CLASSES)
    return model, x, y


def _build_efficient_capsnet(spec, jit_compile, rng):
    size = spec["image_size"]
    model = keras_capsules.models.EfficientCapsNet(input_shape=(size, size, 1))
    model.compile(jit_compile=jit_compile)
    batch_size = spec["batch_size"]
    x = rng.uniform(size=(batch_size, size, size, 1)).astype("float32")
    y = _one_hot(rng, batch_size, CAPSNET_NUM_CLASSES)
    return model, x, y


def _build_capsnet(spec, jit_compile, rng):
    size = spec["image_size"]
    model = keras_capsules.models.CapsNet(
        input_shape=(size, size, 1),
        num_classes=CAPSNET_NUM_CLASSES,
        routing_iterations=spec["routing_iterations"],
    )
    model.compile(jit_compile=jit_compile)
    batch_size = spec["batch_size"]
    x = rng.uniform(size=(batch_size, size, size, 1)).astype("float32")
    y = _one_hot(rng, batch_size, CAPSNET_NUM_CLASSES)
    return model, x, y


def em_conv_caps_model(config, routing_iterations, impl="ours"):
    """ConvCaps1 alone, its flattened outputs as one output tensor."""
    geometry = EM_CONV_CAPS_CONFIGS[config]
    size, num_in = geometry["grid_size"], geometry["num_in"]
    poses = keras.Input(shape=(size, size, num_in, 4, 4), name="poses")
    activations = keras.Input(shape=(size, size, num_in), name="activations")
    layer_class = (
        naive_em.NaiveEMConvCaps
        if impl == "naive"
        else keras_capsules.layers.EMConvCaps
    )
    out_poses, out_activations = layer_class(
        num_capsules=geometry["num_out"],
        kernel_size=3,
        strides=2,
        routing_iterations=routing_iterations,
        name="em_conv_caps",
    )([poses, activations])
    outputs = keras.layers.Concatenate()(
        [
            keras.layers.Flatten()(out_poses),
            keras.layers.Flatten()(out_activations),
        ]
    )
    return keras.Model([poses, activations], outputs)


def em_conv_caps_inputs(config, batch_size, rng):
    geometry = EM_CONV_CAPS_CONFIGS[config]
    size, num_in = geometry["grid_size"], geometry["num_in"]
    poses = rng.standard_normal((batch_size, size, size, num_in, 4, 4))
    activations = rng.uniform(size=(batch_size, size, size, num_in))
    return [poses.astype("float32"), activations.astype("float32")]


def _build_em_conv_caps(spec, jit_compile, rng):
    config, iterations = spec["config"], spec["routing_iterations"]
    model = em_conv_caps_model(config, iterations, "ours")
    if spec["impl"] == "naive":
        naive = em_conv_caps_model(config, iterations, "naive")
        naive_em.copy_weights(model, naive)
        model = naive
    model.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    batch_size = spec["batch_size"]
    x = em_conv_caps_inputs(config, batch_size, rng)
    y = rng.standard_normal((batch_size,) + tuple(model.output.shape[1:]))
    return model, x, y.astype("float32")


def _build_dense_caps(spec, jit_compile, rng):
    shape = DENSE_CAPS_SHAPE
    inputs = keras.Input(shape=(shape["num_in"], shape["dim_in"]))
    capsules = keras_capsules.layers.DenseCaps(
        num_capsules=shape["num_out"],
        capsule_dim=shape["dim"],
        routing_iterations=spec["routing_iterations"],
        name="dense_caps",
    )(inputs)
    lengths = keras_capsules.layers.Length()(capsules)
    model = keras.Model(inputs, lengths)
    model.compile(
        optimizer="adam",
        loss=keras_capsules.losses.MarginLoss(),
        jit_compile=jit_compile,
    )
    batch_size = spec["batch_size"]
    # Squashed primary capsules have lengths below 1.
    x = rng.uniform(-0.3, 0.3, (batch_size, shape["num_in"], shape["dim_in"]))
    y = _one_hot(rng, batch_size, shape["num_out"])
    return model, x.astype("float32"), y


_BUILDERS = {
    "capsnet": _build_capsnet,
    "efficient_capsnet": _build_efficient_capsnet,
    "matrix_capsnet": _build_matrix_capsnet,
    "em_conv_caps": _build_em_conv_caps,
    "dense_caps": _build_dense_caps,
}


def measure_point(spec):
    """Builds, compiles and times one point in this process; returns a row.

    Raises whatever building or running the model raises.
    """
    keras.utils.clear_session()
    keras.utils.set_random_seed(spec["seed"])
    jit_compile = common.default_jit_compile(spec["jit"])
    if jit_compile and keras.backend.backend() == "torch":
        common.configure_torch_compile()
    rng = np.random.default_rng(spec["seed"])
    # The process's memory before the model: interpreter, framework and
    # runtime, which both implementations pay alike.
    baseline_rss = common.peak_rss_mib()
    model, x, y = _BUILDERS[spec["model"]](spec, jit_compile, rng)
    row = dict(spec)
    row["jit_compile"] = model.jit_compile
    # Trainable only: MatrixCapsNet also holds its spread-margin variable.
    row["num_params"] = int(
        sum(np.prod(variable.shape) for variable in model.trainable_weights)
    )
    row.update(
        common.time_train_steps(
            model, x, y, steps=spec["steps"], warmup=spec["warmup"]
        )
    )
    row.update(
        common.time_predict_steps(
            model, x, steps=spec["steps"], warmup=spec["warmup"]
        )
    )
    row["peak_rss_mib"] = common.peak_rss_mib()
    row["baseline_rss_mib"] = baseline_rss
    row["rss_growth_mib"] = row["peak_rss_mib"] - baseline_rss
    row["device_peak_mib"] = common.device_peak_mib()
    return row


def _point_main(spec, out_path):
    try:
        row = measure_point(spec)
        status = 0
    except Exception as error:  # Recorded, so that the run goes on.
        row = dict(spec)
        row["error"] = f"{type(error).__name__}: {error}"[:2000]
        row["traceback"] = traceback.format_exc()[-4000:]
        status = 1
    try:
        row["environment"] = common.environment()
    except Exception as error:
        row["environment"] = {"error": repr(error)}
    with open(out_path, "w") as f:
        json.dump(row, f)
    return status


# Parent: subprocesses, table, ratios


def _child_command(*arguments):
    return [sys.executable, "-m", "benchmarks.run", *arguments]


def _exit_description(returncode):
    if returncode < 0:
        reason = f"killed by signal {-returncode}"
        if -returncode == 9:
            reason += " (out of memory?)"
        return reason
    return f"exited with status {returncode}"


def run_point(spec, timeout):
    """Runs one point in a fresh subprocess; returns its row (or error)."""
    with tempfile.TemporaryDirectory(prefix="keras_capsules_bench_") as tmp:
        out_path = os.path.join(tmp, "row.json")
        command = _child_command(
            "--_point", json.dumps(spec), "--_out", out_path
        )
        start = time.perf_counter()
        try:
            process = subprocess.run(
                command,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {**spec, "error": f"timed out after {timeout:.0f} s"}
        wall = time.perf_counter() - start
        if os.path.exists(out_path):
            with open(out_path) as f:
                row = json.load(f)
        else:
            stderr = (process.stderr or "").strip()[-2000:]
            row = {
                **spec,
                "error": f"{_exit_description(process.returncode)}; "
                f"stderr tail: {stderr}",
            }
    row["wall_seconds"] = wall
    return row


def _environment_from(rows):
    for row in rows:
        environment = row.pop("environment", None)
        if environment and "error" not in environment:
            found = environment
            for rest in rows:
                rest.pop("environment", None)
            return found
    # Every point failed before reporting: ask a fresh process.
    with tempfile.TemporaryDirectory(prefix="keras_capsules_bench_") as tmp:
        out_path = os.path.join(tmp, "environment.json")
        process = subprocess.run(
            _child_command("--_point", "null", "--_out", out_path),
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if os.path.exists(out_path):
            with open(out_path) as f:
                return json.load(f)
        return {"error": _exit_description(process.returncode)}


def compute_ratios(rows, baseline="naive"):
    """Ours/baseline for every (batch, iterations) measured by both;
    `baseline` is the variant of the rows divided by: `"naive"` or the
    baseline model's name."""
    by_key = {}
    for row in rows:
        if "error" in row:
            continue
        key = (row["batch_size"], row["routing_iterations"])
        variant = row.get("variant", row["impl"])
        by_key.setdefault(key, {})[variant] = row
    ratios = []
    for (batch_size, iterations), variants in sorted(by_key.items()):
        if "ours" not in variants or baseline not in variants:
            continue
        entry = {"batch_size": batch_size, "routing_iterations": iterations}
        for key, name in RATIO_KEYS:
            ours, other = variants["ours"].get(key), variants[baseline].get(key)
            entry[name] = ours / other if ours is not None and other else None
        ratios.append(entry)
    return ratios


def _format(value, digits=1):
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}f}"


def format_table(result):
    environment = result["environment"]
    lines = [
        f"{result['model']} ({result['config'] or 'default'}), backend "
        f"{environment.get('backend')} {environment.get('framework')} on "
        f"{environment.get('device')}, Keras {environment.get('keras')}, "
        f"median of {result['steps']} steps after {result['warmup']}, "
        f"XLA_FLAGS={environment.get('xla_flags') or '(unset)'}",
        f"{'impl':<6} {'batch':>5} {'iters':>5} {'jit':>5} "
        f"{'train img/s':>11} {'infer img/s':>11} {'compile s':>9} "
        f"{'peak RSS':>9} {'RSS grow':>9} {'device':>8} {'params':>9}",
    ]
    for row in result["rows"]:
        head = (
            f"{row.get('variant', row['impl']):<6} {row['batch_size']:>5} "
            f"{row['routing_iterations']:>5} "
        )
        if "error" in row:
            lines.append(f"{head}FAILED: {row['error'][:200]}")
            continue
        lines.append(
            f"{head}{str(row['jit_compile']):>5} "
            f"{_format(row['train_images_per_second']):>11} "
            f"{_format(row['inference_images_per_second']):>11} "
            f"{_format(row['compile_seconds']):>9} "
            f"{_format(row['peak_rss_mib'], 0):>9} "
            f"{_format(row['rss_growth_mib'], 0):>9} "
            f"{_format(row['device_peak_mib'], 0):>8} "
            f"{row['num_params']:>9}"
        )
    if result["ratios"]:
        lines.append(
            f"ours/{result.get('baseline') or 'naive'} (time and memory: < 1 "
            "means ours is faster or smaller; img/s: > 1 means ours is "
            "faster)"
        )
        lines.append(
            f"{'batch':>5} {'iters':>5} {'train time':>10} "
            f"{'train img/s':>11} {'infer time':>10} {'peak RSS':>9} "
            f"{'RSS grow':>9} {'device':>7}"
        )
        for entry in result["ratios"]:
            lines.append(
                f"{entry['batch_size']:>5} {entry['routing_iterations']:>5} "
                f"{_format(entry['train_time_ratio'], 3):>10} "
                f"{_format(entry['train_throughput_ratio'], 3):>11} "
                f"{_format(entry['inference_time_ratio'], 3):>10} "
                f"{_format(entry['peak_rss_ratio'], 3):>9} "
                f"{_format(entry['rss_growth_ratio'], 3):>9} "
                f"{_format(entry['device_peak_ratio'], 3):>7}"
            )
    return "\n".join(lines)


def run(args):
    points = _points(args)
    rows = []
    for index, spec in enumerate(points, start=1):
        print(
            f"[{index}/{len(points)}] {spec['model']} impl={spec['impl']} "
            f"batch={spec['batch_size']} "
            f"iterations={spec['routing_iterations']} ...",
            flush=True,
        )
        row = run_point(spec, args.timeout)
        if "error" in row:
            print(f"    failed: {row['error'][:300]}", flush=True)
        else:
            print(
                f"    train {row['train_images_per_second']:.2f} img/s, "
                f"inference {row['inference_images_per_second']:.2f} img/s, "
                f"compile {row['compile_seconds']:.1f} s, peak RSS "
                f"{row['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
        rows.append(row)
    flags = {
        key: value
        for key, value in vars(args).items()
        if not key.startswith("_")
    }
    return {
        "benchmark": "run",
        "environment": _environment_from(rows),
        "flags": flags,
        "model": args.model,
        "config": args.preset if args.model in NAIVE_MODELS else None,
        "steps": args.steps,
        "warmup": args.warmup,
        "baseline": args.baseline_model or "naive",
        "rows": rows,
        "ratios": compute_ratios(rows, args.baseline_model or "naive"),
    }


# Self-check


def _require(condition, message):
    if not condition:
        raise RuntimeError(f"check failed: {message}")


def _finite(name, values):
    for value in values if isinstance(values, list) else [values]:
        array = keras.ops.convert_to_numpy(value)
        _require(np.all(np.isfinite(array)), f"{name} is not finite")


def check(args):
    """Compares the naive baseline with ours on tiny shapes; raises if off."""
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    iterations = args.iterations[0]
    jit_compile = common.default_jit_compile(args.jit)

    # 1. Non-overlapping windows: each child feeds the parents of one
    # window only, so with the per-window normalisation the baseline uses
    # the two layers compute the same function. (The default "official"
    # normalisation gives such a child R = 1 for every parent type.)
    poses = rng.standard_normal((2, 4, 4, 3, 4, 4)).astype("float32")
    activations = rng.uniform(size=(2, 4, 4, 3)).astype("float32")
    ours = keras_capsules.layers.EMConvCaps(
        num_capsules=5,
        kernel_size=2,
        strides=2,
        routing_iterations=iterations,
        routing_normalization="window",
    )
    naive = naive_em.NaiveEMConvCaps(
        num_capsules=5, kernel_size=2, strides=2, routing_iterations=iterations
    )
    expected = ours([poses, activations])
    naive([poses, activations])
    naive.set_weights(ours.get_weights())
    actual = naive([poses, activations])
    for name, a, b in zip(("poses", "activations"), actual, expected):
        a = keras.ops.convert_to_numpy(a)
        b = keras.ops.convert_to_numpy(b)
        error = float(np.max(np.abs(a - b)))
        _require(
            a.shape == b.shape and error < 1e-4,
            f"non-overlapping {name}: max |naive - ours| = {error:.2e}",
        )
        print(f"ok: non-overlapping windows, {name} equal ({error:.1e})")

    # 2. The benchmarked layer and model: equal shapes, finite outputs and
    # finite training losses, from the same weights.
    x_em = em_conv_caps_inputs(args.preset, 2, rng)
    em_models = {
        impl: em_conv_caps_model(args.preset, iterations, impl)
        for impl in ("ours", "naive")
    }
    naive_em.copy_weights(em_models["ours"], em_models["naive"])
    for model in em_models.values():
        model.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    spec = {
        "image_size": args.image_size or DEFAULT_IMAGE_SIZE["matrix_capsnet"],
        "routing_iterations": iterations,
        "config": args.preset,
    }
    arguments = _matrix_capsnet_arguments(spec)
    matrix_ours = keras_capsules.models.MatrixCapsNet(**arguments)
    matrix_ours.compile(jit_compile=jit_compile)
    matrix_naive = naive_em.naive_matrix_capsnet(**arguments)
    naive_em.copy_weights(matrix_ours, matrix_naive)
    naive_em.compile_like_matrix_capsnet(matrix_naive, jit_compile=jit_compile)
    # Layer by layer: MatrixCapsNet also owns its spread-margin variable.
    num_ours = sum(layer.count_params() for layer in matrix_ours.layers)
    num_naive = sum(layer.count_params() for layer in matrix_naive.layers)
    _require(
        num_ours == num_naive,
        f"parameter counts differ: {num_ours} (ours), {num_naive} (naive)",
    )
    for layer in matrix_naive.layers:
        for a, b in zip(
            layer.get_weights(),
            matrix_ours.get_layer(layer.name).get_weights(),
        ):
            _require(np.array_equal(a, b), f"{layer.name} weights differ")
    size = spec["image_size"]
    x_matrix = rng.standard_normal((2, size, size, 1)).astype("float32")
    y_matrix = _one_hot(rng, 2, MATRIX_NUM_CLASSES)
    cases = (
        ("em_conv_caps", em_models["ours"], em_models["naive"], x_em),
        ("matrix_capsnet", matrix_ours, matrix_naive, x_matrix),
    )
    for name, model_ours, model_naive, x in cases:
        out_ours = model_ours.predict_on_batch(x)
        out_naive = model_naive.predict_on_batch(x)
        _require(
            out_ours.shape == out_naive.shape,
            f"{name} output shapes differ: {out_ours.shape} (ours) vs "
            f"{out_naive.shape} (naive)",
        )
        _finite(f"{name} ours output", out_ours)
        _finite(f"{name} naive output", out_naive)
        print(
            f"ok: {name} ({args.preset}) outputs {out_ours.shape}, finite; "
            f"max |naive - ours| = "
            f"{float(np.max(np.abs(out_ours - out_naive))):.3g} "
            "(window-local routing differs where windows overlap)"
        )
    y_em = rng.standard_normal(
        (2,) + tuple(em_models["ours"].output.shape[1:])
    ).astype("float32")
    for name, model, x, y in (
        ("em_conv_caps ours", em_models["ours"], x_em, y_em),
        ("em_conv_caps naive", em_models["naive"], x_em, y_em),
        ("matrix_capsnet ours", matrix_ours, x_matrix, y_matrix),
        ("matrix_capsnet naive", matrix_naive, x_matrix, y_matrix),
    ):
        logs = model.train_on_batch(x, y, return_dict=True)
        _finite(f"{name} training loss", logs["loss"])
        print(f"ok: {name} train step, loss {float(logs['loss']):.4g}")
    print("check passed")


def main(argv=None):
    args = parse_args(argv)
    if args._point is not None:
        spec = json.loads(args._point)
        if spec is None:
            with open(args._out, "w") as f:
                json.dump(common.environment(), f)
            return 0
        return _point_main(spec, args._out)
    if args.check:
        check(args)
        return 0
    print(
        f"Keras {keras.__version__}, backend {keras.backend.backend()}; "
        "every point runs in its own process",
        flush=True,
    )
    result = run(args)
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    status = main()
    sys.exit(status if isinstance(status, int) else 0)
