from common import *

rng = np.random.RandomState(1)
from sonnet.python.modules import spatial_transformer as ST

_orig = ST._create_affine_features


def _patched(output_shape, source_shape):
    # identical to sonnet's, but float64 linspace (sonnet hard-codes float32)
    ranges = [
        np.linspace(-1, 1, x, dtype=np.float64) for x in reversed(output_shape)
    ]
    psi = [x.reshape(-1) for x in np.meshgrid(*ranges, indexing="xy")]
    for _ in range(len(source_shape) - len(output_shape)):
        psi.append(np.zeros_like(psi[0]))
    psi.append(np.ones_like(psi[0]))
    return psi


def official_warp(templates, pose6, output_size, template_size, dt):
    """primary.py TemplateBasedImageDecoder._build lines 224-233, verbatim ops."""
    templates = tf.constant(templates, dt)
    pose = tf.constant(pose6, dt)
    batch_size = int(pose.shape[0])
    if templates.shape[0] == 1:
        templates = snt.TileByDim([0], [batch_size])(templates)
    warper = snt.AffineGridWarper(output_size, template_size)
    warper = warper.inverse()
    grid_coords = snt.BatchApply(warper)(pose)
    resampler = snt.BatchApply(tf.contrib.resampler.resampler)
    transformed_templates = resampler(templates, grid_coords)
    return transformed_templates, grid_coords


cases = []
# canvas 40x40, templates 11x11
for C in (1, 3):
    for sim in (False, True):
        cases.append(
            (
                "B3 K5 11x11x%d ->40x40 sim=%s" % (C, sim),
                3,
                5,
                (11, 11),
                C,
                (40, 40),
                sim,
                2.0,
                False,
            )
        )
cases.append(
    (
        "B3 K5 11x11x1 ->40x40 shared tmpl (B=1)",
        3,
        5,
        (11, 11),
        1,
        (40, 40),
        False,
        2.0,
        True,
    )
)
cases.append(
    ("B2 K4 5x5x1 ->12x12", 2, 4, (5, 5), 1, (12, 12), False, 2.0, False)
)
cases.append(
    ("B2 K4 5x5x2 ->12x12 sim", 2, 4, (5, 5), 2, (12, 12), True, 2.0, False)
)
cases.append(
    (
        "B2 K4 5x5x1 ->12x10 (non-square) ",
        2,
        4,
        (5, 7),
        1,
        (12, 10),
        False,
        2.0,
        False,
    )
)
cases.append(
    (
        "B2 K6 11x11x1 ->40x40 large params",
        2,
        6,
        (11, 11),
        1,
        (40, 40),
        False,
        6.0,
        False,
    )
)

for name, B, K, tsize, C, osize, sim, sd, shared in cases:
    tmpl = (
        rng.rand(1 if shared else B, K) + tuple(tsize) + (C,)
        if False
        else rng.rand(*(((1 if shared else B), K) + tuple(tsize) + (C,)))
    )
    params = rng.randn(B, K, 6) * sd
    for dt in ("patched", tf.float64, tf.float32):
        patched = isinstance(dt, str)
        dt = tf.float64 if patched else dt
        ST._create_affine_features = _patched if patched else _orig
        tf.reset_default_graph()
        pose6 = math_ops.geometric_transform(
            tf.constant(params, dt), sim
        )  # [B,K,6]
        pose6_np = run(pose6)
        out, grid = official_warp(tmpl, pose6_np, osize, tsize, dt)
        out, grid = run([out, grid])
        tm = tmpl if dt == tf.float64 else tmpl.astype(np.float32)
        ref = R.scae_warp_templates(tm, pose6_np, osize)
        record(
            "scae_warp_templates",
            "AffineGridWarper.inverse+resampler",
            name,
            dt.name + ("*" if patched else ""),
            ref,
            out,
        )
        refgrid = np.stack(
            [
                np.stack(
                    [
                        R.scae_sampling_grid(pose6_np[b, k], osize, tsize)
                        for k in range(K)
                    ]
                )
                for b in range(B)
            ]
        )
        record(
            "scae_sampling_grid",
            "snt.AffineGridWarper(...).inverse()",
            name,
            dt.name + ("*" if patched else ""),
            refgrid,
            grid,
        )

# scae_resample vs resampler: points at/inside/outside the border
H, W, C = 6, 8, 2
img = rng.rand(1, H, W, C)
xs = [
    -1.5,
    -1.0,
    -1.0 + 1e-9,
    -0.999,
    -0.5,
    -1e-12,
    0.0,
    0.3,
    3.0,
    3.5,
    W - 2 + 0.5,
    W - 1 - 1e-9,
    W - 1.0,
    W - 1 + 1e-9,
    W - 0.5,
    W - 1e-9,
    float(W),
    W + 0.5,
]
ys = [
    -1.5,
    -1.0,
    -1.0 + 1e-9,
    -0.5,
    0.0,
    0.7,
    2.0,
    H - 1.0,
    H - 0.5,
    H - 1e-9,
    float(H),
    H + 1.0,
]
pts = np.array([[x, y] for x in xs for y in ys])[None]
randpts = np.concatenate(
    [rng.uniform(-2, W + 1, (1, 500, 1)), rng.uniform(-2, H + 1, (1, 500, 1))],
    -1,
)
for name, P in [
    ("6x8x2 image, grid of border pts (%d)" % pts.shape[1], pts),
    ("6x8x2 image, 500 uniform pts in [-2,W+1]x[-2,H+1]", randpts),
]:
    for dt in (tf.float64, tf.float32):
        tf.reset_default_graph()
        o = run(
            tf.contrib.resampler.resampler(
                tf.constant(img, dt), tf.constant(P, dt)
            )
        )
        im = img if dt == tf.float64 else img.astype(np.float32)
        Pc = P if dt == tf.float64 else P.astype(np.float32)
        ref = R.scae_resample(im[0], Pc[0])[None]
        record(
            "scae_resample",
            "tf.contrib.resampler.resampler",
            name,
            dt.name,
            ref,
            o,
        )
        ST._create_affine_features = _orig
        if dt == tf.float64:
            bad = np.abs(ref - o).max(-1)[0] > 1e-12
            for p, r, q in zip(P[0][bad], ref[0][bad], o[0][bad]):
                print("   MISMATCH at", p, "ref", r, "official", q)
