from common import *

rng = np.random.RandomState(0)
rand = rng.randn(7, 9, 6) * 2.0
edge = np.array(
    [
        [0, 0, 0, 0, 0, 0],
        [50, -50, 0.25, 50, -50, 50],
        [-50, 50, -0.5, -50, 50, -50],
        [-0.0, 0.0, 1.0, 1e-9, -1e-9, 0.0],
        [1e-3, -1e-3, 0.125, 0.2, -0.2, 0.1],
        [-3.0, -0.01, 100.0, 1.0, 0.0, -1.0],
        [3.0, 0.0, -100.0, -1.0, 2.0, 0.3],
        [-0.01, -0.005, 1e3, 10.0, -10.0, 0.0],
        [1e-20, -1e-20, 0.5, 0.0, 0.0, 0.0],
    ]
)
edge = np.tile(edge[None], (1, 1, 1))
for name, params in [("randn*2 [7,9,6]", rand), ("edge rows [1,9,6]", edge)]:
    for sim in (True, False):
        for nl in (True, False):
            ref = R.scae_geometric_transform(
                params, similarity=sim, nonlinear=nl
            )
            for dt in (tf.float64, tf.float32):
                tf.reset_default_graph()
                p = tf.constant(params, dt)
                out = run(
                    math_ops.geometric_transform(p, sim, nl, as_matrix=True)
                )
                refc = (
                    ref
                    if dt == tf.float64
                    else R.scae_geometric_transform(
                        params.astype(np.float32), sim, nl
                    )
                )
                record(
                    "scae_geometric_transform",
                    "math_ops.geometric_transform(as_matrix)",
                    "%s sim=%s nl=%s" % (name, sim, nl),
                    dt.name,
                    refc,
                    out,
                )
