"""How far the EM routing defaults are from the official code, one setting
at a time.

`ops.OFFICIAL_EM_OPTIONS` and `ops.OFFICIAL_EM_CLASS_OPTIONS` reproduce
google-research capsule_em's `update_conv_routing` and `update_em_routing`
to float precision (tests/ops/em_reference_test.py). Each row here routes
the same random votes with one setting changed from the official value to
the default's, and prints the largest difference of the parent poses and
activations from the official routing, over five seeds: the figures of
the table "Against the official code" in docs/em_routing.md.

Votes are standard normal, child activations uniform in [0, 1], `beta_v`
uniform in [0.02, 0.1] and `beta_a` in [-0.002, 0.002] (so that every term
of the official activation logit, `5000 beta_a` included, matters); two
examples, 4x4 poses. Convolutional: 4 input and 4 output types, 3x3
kernels, a 6x6 grid at stride 1 and a 9x9 grid at stride 2 (4x4 outputs
both). Class: 72 children (3x3 positions of 8 types), 5 classes; the
"faint" rows scale the activations by 1e-6, where the mass epsilon counts.

Usage:
    KERAS_BACKEND=jax python scripts/em_reference_differences.py
"""

import contextlib
import functools

import numpy as np
from keras import ops

import keras_capsules
from keras_capsules.ops.em import _core as em_core

SEEDS = range(5)
CONV_SHAPES = {1: 6, 2: 9}  # stride -> grid size, 4x4 outputs both


def _betas(rng, num_out):
    beta_v = rng.uniform(0.02, 0.1, num_out).astype("float32")
    beta_a = rng.uniform(-2e-3, 2e-3, num_out).astype("float32")
    return beta_v, beta_a


def _conv(seed, strides, **changes):
    rng = np.random.default_rng(seed)
    grid, kernel, num_in, num_out = CONV_SHAPES[strides], 3, 4, 4
    out = (grid - kernel) // strides + 1
    votes = rng.normal(
        size=(2, out, out, kernel * kernel * num_in, num_out, 16)
    ).astype("float32")
    activations = rng.uniform(size=(2, grid, grid, num_in)).astype("float32")
    beta_v, beta_a = _betas(rng, num_out)
    options = {**keras_capsules.ops.OFFICIAL_EM_OPTIONS, **changes}
    return keras_capsules.ops.em_conv_routing(
        votes, activations, beta_v, beta_a, kernel, strides, **options
    )


def _dense(seed, activation_scale=1.0, **changes):
    rng = np.random.default_rng(seed)
    votes = rng.normal(size=(2, 72, 5, 16)).astype("float32")
    activations = activation_scale * rng.uniform(size=(2, 72))
    activations = activations.astype("float32")
    beta_v, beta_a = _betas(rng, 5)
    options = {**keras_capsules.ops.OFFICIAL_EM_CLASS_OPTIONS, **changes}
    return keras_capsules.ops.em_routing(
        votes, activations, beta_v, beta_a, **options
    )


@contextlib.contextmanager
def _grouped_by_child():
    """The official E-step numerics, but with window entries summed by the
    child they hold: not an option of the library, only a way to isolate
    the effect of the official stride-2 grouping."""
    original = em_core.reference_grouping
    em_core.reference_grouping = lambda geometry: geometry
    try:
        yield
    finally:
        em_core.reference_grouping = original


def _rows():
    """(what changes, routing function, changed options, context)."""
    defaults = em_core.DEFAULTS
    routing = {
        "iterations": defaults.iterations,
        "final_lambda": defaults.final_lambda,
        "mode": defaults.mode,
    }
    normalization = {"normalization": em_core.DEFAULT_NORMALIZATION}
    stride_1 = functools.partial(_conv, strides=1)
    stride_2 = functools.partial(_conv, strides=2)
    plain = contextlib.nullcontext
    faint = functools.partial(_dense, activation_scale=1e-6)
    return [
        ("conv, stride 1: normalization", stride_1, normalization, plain),
        ("conv, stride 2: normalization", stride_2, normalization, plain),
        ("conv, stride 2: grouping alone", stride_2, {}, _grouped_by_child),
        ("conv, stride 1: iterations, lambda, mode", stride_1, routing, plain),
        ("conv, stride 1: all", stride_1, {**routing, **normalization}, plain),
        ("conv, stride 2: all", stride_2, {**routing, **normalization}, plain),
        ("class: epsilon", _dense, {"epsilon": None}, plain),
        ("class, faint: epsilon", faint, {"epsilon": None}, plain),
        ("class: final_lambda 1e-3", _dense, {"final_lambda": 1e-3}, plain),
        ("class: final_lambda 0.01", _dense, {"final_lambda": 0.01}, plain),
        ("class: all", _dense, {**routing, "epsilon": None}, plain),
    ]


def _difference(route, changes, context):
    poses, activations = 0.0, 0.0
    for seed in SEEDS:
        expected = [ops.convert_to_numpy(x) for x in route(seed)]
        with context():
            got = [ops.convert_to_numpy(x) for x in route(seed, **changes)]
        poses = max(poses, float(np.max(np.abs(got[0] - expected[0]))))
        activations = max(
            activations, float(np.max(np.abs(got[1] - expected[1])))
        )
    return poses, activations


def main():
    print("| change from the official setting | max pose diff | max act diff |")
    print("| --- | --- | --- |")
    for name, route, changes, context in _rows():
        poses, activations = _difference(route, changes, context)
        print(f"| {name} | {poses:.2g} | {activations:.2g} |")


if __name__ == "__main__":
    main()
