"""The table and the ratios of a `benchmarks.run` result.

`compute_ratios(rows, baseline)` divides every measured quantity of the
`ours` rows by the same quantity of the `baseline` rows (the naive EM
implementation, a second model, or the official code) at each (batch
size, routing iterations) pair measured by both; `format_table(result)`
writes the rows and ratios of a result as plain-text columns.
"""

import math
import statistics

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


def compute_ratios(rows, baseline="naive"):
    """Ours/baseline for every (batch, iterations) measured by both;
    `baseline` is the variant of the rows divided by: `"naive"`, the
    baseline model's name or `"official"`. A quantity measured several
    times (`--repeats`) enters as the median of its measurements."""
    by_key = {}
    for row in rows:
        if "error" in row:
            continue
        key = (row["batch_size"], row["routing_iterations"])
        variant = row.get("variant", row["impl"])
        by_key.setdefault(key, {}).setdefault(variant, []).append(row)
    ratios = []
    for (batch_size, iterations), variants in sorted(by_key.items()):
        if "ours" not in variants or baseline not in variants:
            continue
        entry = {"batch_size": batch_size, "routing_iterations": iterations}
        for key, name in RATIO_KEYS:
            ours = _median(variants["ours"], key)
            other = _median(variants[baseline], key)
            entry[name] = ours / other if ours is not None and other else None
        ratios.append(entry)
    return ratios


def _median(rows, key):
    """The median of `key` over `rows`, or None where a row lacks it."""
    values = [row.get(key) for row in rows]
    if not values or any(value is None for value in values):
        return None
    return statistics.median(values)


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
        f"{'impl':<8} {'batch':>5} {'iters':>5} {'jit':>5} "
        f"{'train img/s':>11} {'infer img/s':>11} {'compile s':>9} "
        f"{'peak RSS':>9} {'RSS grow':>9} {'device':>8} {'params':>9}",
    ]
    for row in result["rows"]:
        head = (
            f"{row.get('variant', row['impl']):<8} {row['batch_size']:>5} "
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
