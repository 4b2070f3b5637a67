"""The curves of side-by-side runs (`side_by_side_ours.py`,
`side_by_side_official.py`): a table of the test scores of both sides at
every evaluation; a table of how far each run's mean loss lies from
another run's of the same seed (the official code's, and ours for a noise
control), by windows of `--window` steps; with `--plot` a figure of the
loss, its distance from the official code's, the two log-likelihoods and
the scores against the step (a colour per side, ours solid for seed 0 and
dashed for seed 1, and so on); and with `--scores` the scores as JSON.
The official side's k-means accuracies are computed here, from its saved
presences, by the package's `metrics.kmeans_accuracy` (as ours).

    python side_by_side_compare.py --out /tmp/scae_side_by_side \\
        --plot side_by_side.png
"""

import argparse
import collections
import json
import os

import numpy as np

from keras_capsules import metrics

SCORES = ("prior_probe", "prior_kmeans", "posterior_probe", "posterior_kmeans")


def load(out):
    """`{(side, seed): {"log": [records by step], "test": {step:
    scores}}}`."""
    runs = collections.defaultdict(lambda: {"log": {}, "test": {}})
    with open(os.path.join(out, "curves.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            run = runs[(record["side"], record["seed"])]
            if "test" not in record:
                # A run resumed from its last save repeats the steps after
                # it: the later record of a step is kept.
                run["log"][record["step"]] = record
                continue
            test = dict(record["test"])
            if record["side"] == "official":
                saved = np.load(
                    os.path.join(
                        out,
                        f"eval_official_seed{record['seed']}_"
                        f"{record['step']}.npz",
                    )
                )
                for kind in ("prior", "posterior"):
                    presence = saved[f"{kind}_presence"]
                    test[f"{kind}_kmeans"] = metrics.kmeans_accuracy(
                        presence, saved["labels"]
                    )
                    test[f"{kind}_finite"] = bool(np.isfinite(presence).all())
            run["test"][record["step"]] = test
    for run in runs.values():
        run["log"] = [run["log"][step] for step in sorted(run["log"])]
    return runs


def table(runs):
    lines = [
        "| step | " + " | ".join(f"{s} {n}" for s, n in sorted(runs)) + " |",
        "| --- |" + " --- |" * len(runs),
    ]
    steps = sorted({step for run in runs.values() for step in run["test"]})
    for step in steps:
        cells = []
        for key in sorted(runs):
            test = runs[key]["test"].get(step)
            cells.append(
                " / ".join(f"{100 * test[s]:.1f}" for s in SCORES)
                if test
                else ""
            )
        lines.append(f"| {step:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def loss_gaps(runs, reference):
    """`{(side, seed): (steps, gaps)}`: for every other run of a seed that
    `reference` (a side) also ran, `(loss - reference loss) / reference
    loss` of the mean losses at the steps both recorded."""
    gaps = {}
    for (side, seed), run in sorted(runs.items()):
        if side == reference or (reference, seed) not in runs:
            continue
        other = {
            r["step"]: r["mean_loss"] for r in runs[(reference, seed)]["log"]
        }
        pairs = [
            (r["step"], (r["mean_loss"] - other[r["step"]]) / other[r["step"]])
            for r in run["log"]
            if r["step"] in other
        ]
        if pairs:
            gaps[(side, seed)] = tuple(np.array(p) for p in zip(*pairs))
    return gaps


def gap_table(runs, window):
    """Rows of windows of `window` steps; a column per run and reference
    side: the mean relative loss gap in % and its range."""
    columns = {}
    for reference in ("official", "ours"):
        for key, value in loss_gaps(runs, reference).items():
            if key[0] != "official":
                columns[f"{key[0]} - {reference}, seed {key[1]}"] = value
    last = max((int(s[-1]) for s, _ in columns.values()), default=0)
    lines = [
        "| steps | " + " | ".join(columns) + " |",
        "| --- |" + " --- |" * len(columns),
    ]
    for start in range(0, last, window):
        cells = []
        for steps, gaps in columns.values():
            inside = gaps[(steps > start) & (steps <= start + window)]
            cells.append(
                f"{100 * inside.mean():+.2f} ({100 * inside.min():+.1f} to "
                f"{100 * inside.max():+.1f})"
                if len(inside)
                else ""
            )
        lines.append(
            f"| {start + 1:,}-{start + window:,} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def plot(runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("log", "mean_loss", "loss (mean since the last record)"),
        ("gap", None, "loss - official loss, same seed (%)"),
        ("log", "image_log_likelihood", "image log-likelihood"),
        ("log", "part_log_likelihood", "part log-likelihood"),
        ("test", "posterior_kmeans", "posterior k-means (test)"),
        ("test", "posterior_probe", "posterior probe (test)"),
        ("test", "prior_kmeans", "prior k-means (test)"),
    )
    sides = sorted({side for side, _ in runs}, key=lambda s: (s != "ours", s))
    colours = {side: f"C{i}" for i, side in enumerate(sides)}
    gaps = loss_gaps(runs, "official")
    figure, axes = plt.subplots(2, 4, figsize=(19, 8))
    for axis, (kind, key, title) in zip(axes.flat, panels):
        for (side, seed), run in sorted(runs.items()):
            if kind == "gap":
                if (side, seed) not in gaps:
                    continue
                steps, values = gaps[(side, seed)]
                values = 100 * values
            elif kind == "log":
                steps = [r["step"] for r in run["log"]]
                values = [
                    r["mean_loss"] if key == "mean_loss" else r["terms"][key]
                    for r in run["log"]
                ]
            else:
                steps = sorted(run["test"])
                values = [run["test"][s][key] for s in steps]
            axis.plot(
                steps,
                values,
                ("-", "--", ":", "-.")[seed % 4],
                color=colours[side],
                label=f"{side}, seed {seed}",
            )
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    axes.flat[-1].axis("off")
    axes.flat[-1].legend(
        *axes.flat[0].get_legend_handles_labels(), loc="center"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=80)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="/tmp/scae_side_by_side")
    parser.add_argument("--plot", default=None, help="A .png file.")
    parser.add_argument(
        "--window",
        type=int,
        default=500,
        help="The steps of a row of the loss-gap table.",
    )
    parser.add_argument(
        "--scores",
        default=None,
        help="A .json file for the test scores of every run and evaluation.",
    )
    args = parser.parse_args(argv)
    runs = load(args.out)
    print("Test accuracies in % (" + " / ".join(SCORES) + "):")
    print(table(runs))
    print(
        "\nLoss of a run minus that of another of the same seed, relative, "
        "in %: mean (range) of the records in each window:"
    )
    print(gap_table(runs, args.window))
    if args.scores:
        scores = {
            f"{side} seed {seed}": {
                str(step): {s: float(test[s]) for s in SCORES}
                for step, test in sorted(run["test"].items())
            }
            for (side, seed), run in sorted(runs.items())
        }
        with open(args.scores, "w") as f:
            json.dump(scores, f, indent=1)
        print(f"wrote {args.scores}")
    if args.plot:
        plot(runs, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
