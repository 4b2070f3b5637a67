from common import *

rng = np.random.RandomState(4)
cases = [
    ("U(0,1) [32,24]", rng.rand(32, 24)),
    ("U(0,1) [7,10]", rng.rand(7, 10)),
    ("with exact 0s, an all-0 row, a one-hot row [8,12]", None),
    ("all zeros [4,6]", np.zeros((4, 6))),
    ("all ones [5,16]", np.ones((5, 16))),
    ("tiny 1e-20..1e-12 [4,6]", 10 ** rng.uniform(-20, -12, (4, 6))),
]
p = rng.rand(8, 12)
p[p < 0.3] = 0
p[2] = 0
p[5] = 0
p[5, 3] = 1.0
cases[2] = (cases[2][0], p)
for name, pres in cases:
    for kind in ("l2", "entropy"):
        wcs = (0.0, 2.5) if kind == "l2" else (0.0,)
        for wc in wcs:
            for dt in (tf.float64, tf.float32):
                tf.reset_default_graph()
                pt = tf.constant(pres, dt)
                if kind == "l2":
                    o = capsule.sparsity_loss(
                        "l2", pt, num_classes=10, within_example_constant=wc
                    )
                else:
                    o = capsule.sparsity_loss(
                        "entropy",
                        pt,
                        num_classes=10,
                        within_example_constant=wc,
                    )  # unused kwargs
                o = run(list(o))
                pc = (
                    pres
                    if dt == tf.float64
                    else pres.astype(np.float32).astype(np.float64)
                )
                ref = R.scae_sparsity(
                    pc, kind, num_classes=10, within_constant=wc
                )
                record(
                    "scae_sparsity(%s) within" % kind,
                    "sparsity_loss('%s')[0]" % kind,
                    "%s wc=%g" % (name, wc),
                    dt.name,
                    ref[0],
                    o[0],
                )
                record(
                    "scae_sparsity(%s) between" % kind,
                    "sparsity_loss('%s')[1]" % kind,
                    "%s wc=%g" % (name, wc),
                    dt.name,
                    ref[1],
                    o[1],
                )
