"""Compares parity_export.py's results (ours_<backend>.npz) with
parity_official.py's (official.npz): loss, terms and per-variable
gradients on batch 0, and the loss per step and the weights after the
optimizer steps. Runs under Python 3.7 or 3.11 (NumPy only).

    python parity_compare.py --out /tmp/scae_parity [--verbose]

Two tolerances. `--tolerance` (1e-4) holds for what one step computes:
the loss, its terms and the gradients on batch 0, and the loss of every
step. `--trajectory-tolerance` (1e-2) holds for the change of the weights
after all the steps, where two float32 runs drift apart by more: a ReLU
whose input is within ~1e-7 of zero for one example takes the other side
in one run, and that example's gradient through the unit is then counted
in one run only (see README.md). Variables whose change is below ~1e4
float32 ulps of their weights are listed but left out of that check.
"""

from __future__ import print_function

import argparse
import os

import numpy as np

# A change is resolvable if one float32 ulp of the weight is at most this
# fraction of it.
RESOLVABLE = 1e-4


def relative(a, b):
    """|a - b|.max() / |b|.max() (the absolute error where b is 0)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    error = np.abs(a - b).max()
    scale = np.abs(b).max()
    return error / scale if scale > 0 else error


def ulp_floor(weights, change):
    """One float32 ulp of the largest weight, relative to the change."""
    top = np.float32(np.abs(weights).max())
    return float(np.spacing(top)) / float(np.abs(change).max())


def keys(npz, prefix):
    return sorted(k[len(prefix) :] for k in npz.files if k.startswith(prefix))


def summary(values):
    values = np.asarray(values)
    return "max %.2e  median %.2e" % (values.max(), np.median(values))


def listed(rows, verbose, count=12):
    return rows if verbose else rows[:count]


def compare_batch0(ours, official, verbose):
    print("-- batch 0: loss and terms (ours, official, relative difference)")
    rows = [("loss", ours["loss"], official["loss"])]
    rows += [
        (name, ours["term/" + name], official["term/" + name])
        for name in keys(official, "term/")
    ]
    for name, a, b in rows:
        print("  %-28s %16.8f %16.8f %9.2e" % (name, a, b, relative(a, b)))
    terms = max(relative(a, b) for name, a, b in rows if "accuracy" not in name)

    paths = keys(official, "grad/")
    if paths != keys(ours, "grad/"):
        raise SystemExit("ours and the official results hold other weights")
    grads = sorted(
        [
            (relative(ours["grad/" + p], official["grad/" + p]), p)
            for p in paths
        ],
        reverse=True,
    )
    print("-- batch 0: gradient, |ours - official|.max() / |official|.max()")
    for error, path in listed(grads, verbose):
        note = ""
        if "nograd/" + path in official.files:
            note = "  (official: no gradient; ours: max |g| %.1e)" % (
                np.abs(ours["grad/" + path]).max()
            )
        elif np.abs(official["grad/" + path]).max() == 0:
            note = "  (zero on both sides)" if error == 0 else "  (official 0)"
        print("  %9.2e  %s%s" % (error, path, note))
    if not verbose:
        print("  ... (%d more; --verbose lists all)" % (len(grads) - 12))
    nonzero = [
        e
        for e, p in grads
        if np.abs(official["grad/" + p]).max() > 0
        and "nograd/" + p not in official.files
    ]
    print(
        "  %d nonzero official gradients: %s; %d zero on both sides"
        % (len(nonzero), summary(nonzero), len(grads) - len(nonzero))
    )
    return {"loss and terms": terms, "gradient": max(e for e, _ in grads)}


def compare_steps(ours, official, verbose):
    steps = len(official["step_loss"])
    print("-- %d optimizer steps: loss per step (ours, official)" % steps)
    errors = [
        relative(a, b) for a, b in zip(ours["step_loss"], official["step_loss"])
    ]
    for i in range(steps):
        print(
            "  step %2d  %14.6f %14.6f %9.2e"
            % (i, ours["step_loss"][i], official["step_loss"][i], errors[i])
        )
    print("  terms, largest relative difference over the steps:")
    for name in keys(official, "step_term/"):
        if "accuracy" in name:
            continue
        error = max(
            relative(a, b)
            for a, b in zip(
                ours["step_term/" + name], official["step_term/" + name]
            )
        )
        print("    %-28s %9.2e" % (name, error))

    print(
        "-- weights after %d steps: relative error of the change from the "
        "initial weights, |d_ours - d_official|.max() / "
        "|d_official|.max(), and of the weights" % steps
    )
    rows, unresolved, unchanged = [], [], []
    for path in keys(official, "final/"):
        init = official["init/" + path]
        if not np.array_equal(init, ours["init/" + path]):
            raise SystemExit("%s: other initial weights" % path)
        d_ours = ours["final/" + path] - init
        d_official = official["final/" + path] - init
        weight = relative(ours["final/" + path], official["final/" + path])
        if np.abs(d_official).max() == 0:
            unchanged.append((path, np.abs(d_ours).max()))
            continue
        floor = ulp_floor(official["final/" + path], d_official)
        row = (relative(d_ours, d_official), weight, floor, path)
        (rows if floor <= RESOLVABLE else unresolved).append(row)
    rows.sort(reverse=True)
    for change, weight, floor, path in listed(rows, verbose):
        print("  change %9.2e  weight %9.2e  %s" % (change, weight, path))
    if not verbose:
        print("  ... (%d more; --verbose lists all)" % (len(rows) - 12))
    print(
        "  change of %d variables: %s; their weights: %s"
        % (
            len(rows),
            summary([r[0] for r in rows]),
            summary([r[1] for r in rows]),
        )
    )
    for change, weight, floor, path in sorted(unresolved, reverse=True):
        print(
            "  change %9.2e  weight %9.2e  %s (1 ulp of the weight is %.1e "
            "of the change: float32 does not resolve it better)"
            % (change, weight, path, floor)
        )
    moved = [p for p, m in unchanged if m > 0]
    print(
        "  %d variables unchanged in the official run (%s); ours moved %d"
        % (len(unchanged), "no gradient or a zero one", len(moved))
    )
    return {
        "step loss": max(errors),
        "change": max(r[0] for r in rows),
        "moved": float(len(moved)),
    }


def trace_table(out):
    """With --trace runs: the largest and median relative error of the
    change from the initial weights after every step, over the resolvable
    variables, per pair of runs."""
    traces = {}
    for side in ("official", "jax", "tensorflow"):
        path = os.path.join(out, "trace_%s.npz" % side)
        if os.path.exists(path):
            npz = np.load(path)
            traces[side] = {k: npz[k] for k in npz.files}
    if "official" not in traces or len(traces) < 2:
        return
    init = np.load(os.path.join(out, "init_weights.npz"))
    init = {k: init[k] for k in init.files}
    pairs = [
        (a, b)
        for a, b in [
            ("jax", "official"),
            ("tensorflow", "official"),
            ("jax", "tensorflow"),
        ]
        if a in traces and b in traces
    ]
    print("=" * 78)
    print(
        "change from the initial weights after each step: largest (median) "
        "relative error over the resolvable variables"
    )
    print("  step  " + "".join("%-24s" % ("%s-%s" % p) for p in pairs))
    steps = len(traces["official"][sorted(init)[0]])
    for k in range(steps):
        cells = []
        for a, b in pairs:
            errors = []
            for path in init:
                d_b = traces[b][path][k] - init[path]
                if np.abs(d_b).max() == 0:
                    continue
                if ulp_floor(traces[b][path][k], d_b) > RESOLVABLE:
                    continue
                errors.append(relative(traces[a][path][k] - init[path], d_b))
            cells.append("%.2e (%.2e)" % (max(errors), np.median(errors)))
        print("  %4d  " % k + "".join("%-24s" % c for c in cells))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="/tmp/scae_parity")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--trajectory-tolerance", type=float, default=1e-2)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    official = np.load(os.path.join(args.out, "official.npz"))
    print("official optimizer: %s" % official["optimizer"])
    verdicts = []
    for backend in ("jax", "tensorflow"):
        path = os.path.join(args.out, "ours_%s.npz" % backend)
        if not os.path.exists(path):
            continue
        ours = np.load(path)
        print("ours (%s) optimizer: %s" % (backend, ours["optimizer"]))
        print("=" * 78)
        print("ours (%s) vs official" % backend)
        worst = compare_batch0(ours, official, args.verbose)
        worst.update(compare_steps(ours, official, args.verbose))
        limits = {
            "loss and terms": args.tolerance,
            "gradient": args.tolerance,
            "step loss": args.tolerance,
            "change": args.trajectory_tolerance,
            "moved": 0.0,
        }
        bad = sorted(k for k in limits if worst[k] > limits[k])
        verdicts.append(
            "%s %s (gradient %.1e, loss and terms %.1e, step loss %.1e, "
            "%d-step change %.1e)"
            % (
                backend,
                "PASS" if not bad else "FAIL on " + ", ".join(bad),
                worst["gradient"],
                worst["loss and terms"],
                worst["step loss"],
                len(official["step_loss"]),
                worst["change"],
            )
        )
    trace_table(args.out)
    print("=" * 78)
    if not verdicts:
        raise SystemExit("no ours_<backend>.npz under %s" % args.out)
    print(
        "VERDICT (tolerance %.0e; trajectory %.0e): %s"
        % (
            args.tolerance,
            args.trajectory_tolerance,
            "; ".join(verdicts),
        )
    )


if __name__ == "__main__":
    main()
