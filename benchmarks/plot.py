"""Scaling curves from `benchmarks/run.py` results, with a linearity check.

Reads one or more JSON files written by `python -m benchmarks.run --json`
and draws, for every measured series (model, config, implementation,
backend), the training and inference images per second, the per-step
time and the peak memory (the accelerator's peak where it was measured,
else the process's peak resident memory) against the batch size (one
curve per number of routing iterations) and against the routing
iterations (one curve per batch size). Points that failed are left out.

It also prints a linearity check for every curve of at least three
points: a least-squares straight line `y = intercept + slope * x` for the
training step time, the inference time and the peak memory, with its
coefficient of determination R^2 (1 for a perfect line) and the largest
deviation from the line relative to the largest value. Cost that grows
linearly with the batch size and with the iterations gives an R^2 close
to 1; a quadratic term shows as a lower R^2 and residuals of one sign at
the ends and the other in the middle.

Usage:
    python -m benchmarks.plot em_batch.json --out em_batch.png
    python -m benchmarks.plot em_batch.json em_iterations.json \\
        --out em_curves.png --json em_fits.json
"""

import argparse
import json

import numpy as np

# (row key, label) of every quantity fitted; times in seconds, memory in
# MiB.
FITTED = (
    ("step_seconds", "train step s"),
    ("predict_seconds", "inference s"),
    ("memory_mib", "peak MiB"),
)
AXES = (("batch_size", "batch size"), ("routing_iterations", "iterations"))
_AVERAGED = (
    "step_seconds",
    "predict_seconds",
    "memory_mib",
    "train_images_per_second",
    "inference_images_per_second",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="run.py JSON files.")
    parser.add_argument(
        "--out",
        default="curves.png",
        help="Image file to write. Defaults to curves.png.",
    )
    parser.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help="Also write the fitted lines here.",
    )
    return parser.parse_args(argv)


def load_rows(paths):
    """The successful rows of every file, each with `series` and
    `memory_mib` (device peak where measured, else peak RSS)."""
    rows = []
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        backend = result.get("environment", {}).get("backend", "?")
        for row in result["rows"]:
            if "error" in row:
                continue
            row = dict(row)
            config = row.get("config")
            name = row["model"] + (f" {config}" if config else "")
            row["series"] = f"{name} {row['impl']} ({backend})"
            device = row.get("device_peak_mib")
            row["memory_mib"] = (
                row["peak_rss_mib"] if device is None else device
            )
            row["memory_kind"] = "RSS" if device is None else "device"
            rows.append(row)
    return _merge_duplicates(rows)


def _merge_duplicates(rows):
    """One row per (series, batch, iterations): the mean of repeats, which
    appear when several files measured the same point."""
    groups = {}
    for row in rows:
        key = (row["series"], row["batch_size"], row["routing_iterations"])
        groups.setdefault(key, []).append(row)
    merged = []
    for members in groups.values():
        row = dict(members[0])
        for key in _AVERAGED:
            values = [member.get(key) for member in members]
            if all(value is not None for value in values):
                row[key] = float(np.mean(values))
        row["repeats"] = len(members)
        merged.append(row)
    return merged


def curves(rows, axis):
    """Groups rows into curves along `axis`: {(series, fixed): rows}.

    `fixed` is the value of the other axis; only curves of at least two
    distinct `axis` values are kept, sorted along `axis`.
    """
    other = "routing_iterations" if axis == "batch_size" else "batch_size"
    groups = {}
    for row in rows:
        groups.setdefault((row["series"], row[other]), []).append(row)
    result = {}
    for key, members in sorted(groups.items()):
        members = sorted(members, key=lambda row: row[axis])
        if len({row[axis] for row in members}) >= 2:
            result[key] = members
    return result


def fit_line(x, y):
    """Least-squares line through (x, y); returns its numbers."""
    x = np.asarray(x, dtype="float64")
    y = np.asarray(y, dtype="float64")
    slope, intercept = np.polyfit(x, y, 1)
    residuals = y - (intercept + slope * x)
    total = float(np.sum((y - np.mean(y)) ** 2))
    r_squared = 1.0 - float(np.sum(residuals**2)) / total if total else 1.0
    scale = float(np.max(np.abs(y))) or 1.0
    return {
        "intercept": float(intercept),
        "slope": float(slope),
        "r_squared": r_squared,
        "max_relative_residual": float(np.max(np.abs(residuals))) / scale,
    }


def linearity(rows):
    """Fits every curve of >= 3 points; returns a list of fit records."""
    fits = []
    for axis, _ in AXES:
        other = "routing_iterations" if axis == "batch_size" else "batch_size"
        for (series, fixed), members in curves(rows, axis).items():
            if len(members) < 3:
                continue
            x = [row[axis] for row in members]
            for key, label in FITTED:
                y = [row[key] for row in members]
                if any(v is None for v in y):
                    continue
                fits.append(
                    {
                        "series": series,
                        "x": axis,
                        other: fixed,
                        "y": key,
                        "label": label,
                        "points": len(members),
                        **fit_line(x, y),
                    }
                )
    return fits


def format_fits(fits):
    lines = [
        "Linearity check: least-squares line y = intercept + slope * x",
        f"{'series':<38} {'x':<10} {'fixed':>7} {'y':<13} {'n':>2} "
        f"{'intercept':>10} {'slope':>10} {'R^2':>7} {'max resid':>9}",
    ]
    for fit in fits:
        fixed_key = (
            "routing_iterations" if fit["x"] == "batch_size" else "batch_size"
        )
        fixed = f"{'it' if fixed_key == 'routing_iterations' else 'b'}="
        fixed += str(fit[fixed_key])
        lines.append(
            f"{fit['series'][:38]:<38} {dict(AXES)[fit['x']]:<10} {fixed:>7} "
            f"{fit['label']:<13} {fit['points']:>2} "
            f"{fit['intercept']:>10.4g} {fit['slope']:>10.4g} "
            f"{fit['r_squared']:>7.4f} {fit['max_relative_residual']:>9.1%}"
        )
    return "\n".join(lines)


def plot(rows, out_path):
    """Draws the curves; returns the number of curves drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, grid = plt.subplots(len(AXES), 3, figsize=(16, 9), squeeze=False)
    drawn = 0
    memory_kinds = sorted({row["memory_kind"] for row in rows}) or ["RSS"]
    for line, (axis, axis_label) in enumerate(AXES):
        throughput, time_axes, memory = grid[line]
        fixed_name = "it" if axis == "batch_size" else "batch"
        for (series, fixed), members in curves(rows, axis).items():
            x = [row[axis] for row in members]
            label = f"{series}, {fixed_name}={fixed}"
            (train,) = throughput.plot(
                x,
                [row["train_images_per_second"] for row in members],
                "o-",
                label=f"{label} train",
            )
            throughput.plot(
                x,
                [row["inference_images_per_second"] for row in members],
                "s--",
                color=train.get_color(),
                label=f"{label} inference",
            )
            steps = [row["step_seconds"] for row in members]
            time_axes.plot(x, steps, "o", color=train.get_color())
            if len(members) >= 2:
                fit = fit_line(x, steps)
                grid_x = np.linspace(min(x), max(x), 50)
                time_axes.plot(
                    grid_x,
                    fit["intercept"] + fit["slope"] * grid_x,
                    "-",
                    color=train.get_color(),
                    label=f"{label} (R^2={fit['r_squared']:.3f})",
                )
            memory.plot(
                x,
                [row["memory_mib"] for row in members],
                "o-",
                color=train.get_color(),
                label=label,
            )
            drawn += 1
        throughput.set_ylabel("images / s")
        time_axes.set_ylabel("train step s (points) and line fit")
        memory.set_ylabel(f"peak MiB ({' or '.join(memory_kinds)})")
        for axes in (throughput, time_axes, memory):
            axes.set_xlabel(axis_label)
            axes.grid(True, alpha=0.3)
            if axes.get_legend_handles_labels()[0]:
                axes.legend(fontsize=6)
        # Time and memory stay on linear axes, where linear growth is a
        # straight line.
        if axis == "batch_size":
            throughput.set_xscale("log", base=2)
    figure.suptitle(
        "keras_capsules benchmarks: throughput, step time and memory"
    )
    figure.tight_layout()
    figure.savefig(out_path, dpi=120)
    plt.close(figure)
    return drawn


def main(argv=None):
    args = parse_args(argv)
    rows = load_rows(args.results)
    fits = linearity(rows)
    if fits:
        print(format_fits(fits))
    else:
        print("No curve of 3 or more points: nothing to fit.")
    drawn = plot(rows, args.out)
    if drawn:
        print(f"wrote {args.out} ({drawn} curves)")
    else:
        print(
            f"wrote {args.out}, empty: no curve has two or more batch sizes "
            "or iteration counts"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"fits": fits, "inputs": args.results}, f, indent=2)
    return fits


if __name__ == "__main__":
    main()
