"""The curves of side-by-side runs (`side_by_side_ours.py`,
`side_by_side_official.py`): a table of the test scores of both sides at
every evaluation, with `--plot` a figure of the loss, the two
log-likelihoods and the scores against the step (one line per side and
seed: ours solid, official dashed, a noise control dotted), and with
`--scores` the scores as JSON. The official side's k-means accuracies are
computed here, from its saved presences, by the package's
`metrics.kmeans_accuracy` (as ours).

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


def plot(runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("log", "mean_loss", "loss (mean since the last record)"),
        ("log", "image_log_likelihood", "image log-likelihood"),
        ("log", "part_log_likelihood", "part log-likelihood"),
        ("test", "posterior_kmeans", "posterior k-means (test)"),
        ("test", "posterior_probe", "posterior probe (test)"),
        ("test", "prior_kmeans", "prior k-means (test)"),
    )
    figure, axes = plt.subplots(2, 3, figsize=(15, 8))
    for axis, (kind, key, title) in zip(axes.flat, panels):
        for (side, seed), run in sorted(runs.items()):
            if kind == "log":
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
                {"ours": "-", "official": "--"}.get(side, ":"),
                label=f"{side}, seed {seed}",
            )
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    axes.flat[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=80)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="/tmp/scae_side_by_side")
    parser.add_argument("--plot", default=None, help="A .png file.")
    parser.add_argument(
        "--scores",
        default=None,
        help="A .json file for the test scores of every run and evaluation.",
    )
    args = parser.parse_args(argv)
    runs = load(args.out)
    print("Test accuracies in % (" + " / ".join(SCORES) + "):")
    print(table(runs))
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
