import os, sys, warnings

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
warnings.filterwarnings("ignore")
# The parent folder of an export of akosiorek/stacked_capsule_autoencoders
# (it imports itself as `stacked_capsule_autoencoders.capsules`), and this
# repository's tests/ for the NumPy references.
sys.path.insert(0, os.environ.get("OFFICIAL_SCAE_PARENT", "/tmp/scae_official"))
sys.path.insert(
    0,
    os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"
    ),
)
import numpy as np
import tensorflow as tf

tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
import sonnet as snt
import tensorflow_probability as tfp

tfd = tfp.distributions
import references as R
from stacked_capsule_autoencoders.capsules import (
    math_ops,
    prob,
    capsule,
    attention,
)
from stacked_capsule_autoencoders.capsules.tensor_ops import make_brodcastable

ROWS = []


def diff(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    ad = np.abs(a - b)
    rd = ad / np.maximum(np.abs(b), 1e-300)
    rd = np.where(ad == 0, 0.0, rd)
    # relative diff as |a-b| / max(|b|, tiny); also a "mixed" measure |a-b|/(1+|b|)
    mixed = ad / (1.0 + np.abs(b))
    return float(ad.max()), float(rd.max()), float(mixed.max())


def record(ref, off, inputs, dtype, a_ref, b_off, tol=1e-6, note=""):
    ad, rd, mx = diff(a_ref, b_off)
    ok = mx <= tol
    ROWS.append(
        (ref, off, inputs, dtype, ad, rd, mx, "PASS" if ok else "FAIL", note)
    )
    print(
        "%-34s | %-40s | %-45s | %-7s | abs %.3e | rel %.3e | mixed %.3e | %s %s"
        % (ref, off, inputs, dtype, ad, rd, mx, "PASS" if ok else "FAIL", note),
        flush=True,
    )


def run(fetches, init=False):
    with tf.Session() as s:
        if init:
            s.run(tf.global_variables_initializer())
        return s.run(fetches)
