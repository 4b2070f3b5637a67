from common import *
import types

rng = np.random.RandomState(3)


class TF64(types.ModuleType):
    """Proxy for `tf` inside capsule.py only, so that its hard-coded float32
    pieces (tf.zeros at capsule.py:364/373/422, tf.log(10.) at 365/373,
    tf.to_float at 385, tf.get_variable at 420) produce float64."""

    def __getattr__(self, k):
        return getattr(tf, k)

    def zeros(self, shape, dtype=None, name=None):
        return tf.zeros(shape, tf.float64, name)

    def log(self, x, name=None):
        return tf.log(
            tf.cast(x, tf.float64) if not isinstance(x, tf.Tensor) else x
        )

    def to_float(self, x, name=None):
        return tf.cast(x, tf.float64)

    def get_variable(self, *a, **k):
        k.setdefault("dtype", tf.float64)
        return tf.get_variable(*a, **k)


def official(x, votes, scales, vp, presence, f64):
    capsule.tf = TF64("tf64") if f64 else tf
    dt = tf.float64 if f64 else tf.float32
    try:
        lik = capsule.CapsuleLikelihood(
            tf.constant(votes, dt), tf.constant(scales, dt), tf.constant(vp, dt)
        )
        o = lik(
            tf.constant(x, dt),
            None if presence is None else tf.constant(presence, dt),
        )
        return run([o.log_prob, o.posterior_mixing_probs, o.winner], init=True)
    finally:
        capsule.tf = tf


def case(
    name, B, O, P, vp_fn=None, pres_fn=None, scale_rng=(0.2, 2.0), far=False
):
    votes = rng.randn(B, O, P, 2)
    x = votes[:, rng.randint(O)] + rng.randn(B, P, 2) * 0.5
    if far:
        x[:, : P // 2] += 30.0
    scales = rng.uniform(*scale_rng, size=(B, O, P))
    vp = rng.rand(B, O, P)
    if vp_fn:
        vp_fn(vp)
    presence = None
    if pres_fn:
        presence = rng.rand(B, P)
        pres_fn(presence)
    for f64 in (True, False):
        tf.reset_default_graph()
        lp, post, win = official(x, votes, scales, vp, presence, f64)
        c = (
            (lambda a: a)
            if f64
            else (
                lambda a: (
                    None
                    if a is None
                    else np.asarray(a, np.float32).astype(np.float64)
                )
            )
        )
        rl, rp, rw = R.scae_part_likelihood(
            c(x), c(votes), c(scales), c(vp), c(presence), normalize=False
        )
        dn = "float64(shim)" if f64 else "float32"
        record(
            "scae_part_likelihood[0].mean()",
            "CapsuleLikelihood.log_prob",
            name,
            dn,
            rl.mean(),
            lp,
        )
        record(
            "scae_part_likelihood[1]",
            "CapsuleLikelihood.posterior_mixing_probs",
            name,
            dn,
            rp,
            post,
        )
        n_bad = int(
            np.sum(
                np.any(
                    rw
                    != (
                        win
                        if f64
                        else win.astype(np.float32).astype(np.float64)
                    ),
                    -1,
                )
            )
        )
        record(
            "scae_part_likelihood[2]",
            "CapsuleLikelihood.winner",
            name,
            dn,
            rw,
            win,
            note="(%d/%d winners differ)" % (n_bad, B * P),
        )


def zeros_vp(vp):
    vp[0, 1] = 0.0  # one object absent for all parts
    vp[1, :, 3] = 0.0  # one part with every vote presence 0
    vp[2, 0, :2] = 1.0
    vp[2, 2, :2] = 1e-17  # below safe_log's eps


def pres_edge(p):
    p[0, 0] = 0.0
    p[1, :] = 1.0
    p[2, 1] = 0.0


case("B4 O5 P7, presence=None", 4, 5, 7)
case("B4 O5 P7, float presence U(0,1)", 4, 5, 7, pres_fn=lambda p: None)
case(
    "B4 O5 P7, vote_presence with 0 / 1e-17 / all-0 part; presence with 0 and 1",
    4,
    5,
    7,
    zeros_vp,
    pres_edge,
)
case(
    "B3 O4 P10, half the parts 30 away (dummy wins), small scales",
    3,
    4,
    10,
    zeros_vp,
    pres_edge,
    scale_rng=(0.05, 0.2),
    far=True,
)
case("B2 O3 P6, large scales", 2, 3, 6, scale_rng=(5.0, 20.0))
