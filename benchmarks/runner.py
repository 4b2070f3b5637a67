"""Runs the measurement points of `benchmarks.run`, each in its own process.

The peak resident memory of a process is a high-water mark that only
grows, so every point (model, implementation, batch size, routing
iterations) is built and timed in a fresh Python subprocess,
`python -m benchmarks.runner SPEC_JSON OUT_PATH`, which writes one JSON
row to `OUT_PATH`. A point that fails (an exception, a non-zero exit, a
kill for memory, the timeout) is recorded with its error, and the run
goes on.

`measure_point(spec)` is the measurement itself, in this process:
- training images per second: the median of `spec["steps"]` timed
  `train_on_batch` calls on one fixed batch, after `spec["warmup"]`
  untimed ones (the first of which traces and compiles the step);
- inference images per second: the same for `predict_on_batch`;
- the compile time (the first training step, and the first prediction);
- the peak resident memory of the process (MiB), its growth from just
  before the model was built, and the accelerator's peak (None on CPU);
- the number of trainable parameters and the resolved `jit_compile`.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import keras
import numpy as np

# Runnable both as `python -m benchmarks.runner` and as a file.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import _process  # noqa: E402
from benchmarks import common  # noqa: E402
from benchmarks import models  # noqa: E402


def measure_point(spec):
    """Builds, compiles and times one point in this process; returns a row.

    Raises whatever building or running the model raises.
    """
    keras.utils.clear_session()
    keras.utils.set_random_seed(spec["seed"])
    if (
        common.default_jit_compile(spec["jit"])
        and keras.backend.backend() == "torch"
    ):
        common.configure_torch_compile()
    rng = np.random.default_rng(spec["seed"])
    # The process's memory before the model: interpreter, framework and
    # runtime, which both implementations pay alike.
    baseline_rss = _process.peak_rss_mib()
    model, x, y = models.build(spec, rng)
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
    row["peak_rss_mib"] = _process.peak_rss_mib()
    row["baseline_rss_mib"] = baseline_rss
    row["rss_growth_mib"] = row["peak_rss_mib"] - baseline_rss
    row["device_peak_mib"] = common.device_peak_mib()
    return row


def _point_main(spec, out_path):
    """Measures `spec` and writes its row, with the environment, to
    `out_path`; with `spec=None`, writes only the environment."""
    if spec is None:
        with open(out_path, "w") as f:
            json.dump(common.environment(), f)
        return 0
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


def child_command(spec, out_path):
    """The command that measures `spec` and writes its row to `out_path`:
    this module in this interpreter, or `official_codes.py` in
    `spec["official_python"]` for an official point."""
    if spec is not None and spec["impl"] == "official":
        script = os.path.join(ROOT, "benchmarks", "official_codes.py")
        return [spec["official_python"], script, json.dumps(spec), out_path]
    return [
        sys.executable,
        "-m",
        "benchmarks.runner",
        json.dumps(spec),
        out_path,
    ]


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
        start = time.perf_counter()
        try:
            process = subprocess.run(
                child_command(spec, out_path),
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


def environment_from(rows):
    """The environment the points reported (removed from every row); asks
    a fresh process when every point failed before reporting it."""
    for row in rows:
        environment = row.pop("environment", None)
        if environment and "error" not in environment:
            found = environment
            for rest in rows:
                rest.pop("environment", None)
            return found
    with tempfile.TemporaryDirectory(prefix="keras_capsules_bench_") as tmp:
        out_path = os.path.join(tmp, "environment.json")
        process = subprocess.run(
            child_command(None, out_path),
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if os.path.exists(out_path):
            with open(out_path) as f:
                return json.load(f)
        return {"error": _exit_description(process.returncode)}


def run_points(points, timeout):
    """Runs every point in its own process, in order, printing progress.

    Returns the rows, failed points with an `"error"`.
    """
    rows = []
    for index, spec in enumerate(points, start=1):
        print(
            f"[{index}/{len(points)}] {spec['model']} impl={spec['impl']} "
            f"batch={spec['batch_size']} "
            f"iterations={spec['routing_iterations']} ...",
            flush=True,
        )
        row = run_point(spec, timeout)
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
    return rows


def main(argv=None):
    spec_json, out_path = sys.argv[1:] if argv is None else argv
    return _point_main(json.loads(spec_json), out_path)


if __name__ == "__main__":
    sys.exit(main())
