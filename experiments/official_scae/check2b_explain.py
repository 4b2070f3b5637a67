from common import *
from sonnet.python.modules import spatial_transformer as ST

rng = np.random.RandomState(1)


def resample_f32floor(image, points):
    # scae_resample, but floor taken of float32(x) as the TF kernel does
    H, W, C = image.shape
    out = np.zeros(points.shape[:-1] + (C,))
    for idx in np.ndindex(points.shape[:-1]):
        x, y = points[idx]
        if not (-1 < x < W and -1 < y < H):
            continue
        fx, fy = int(np.floor(np.float32(x))), int(np.floor(np.float32(y)))
        cx, cy = fx + 1, fy + 1
        dx, dy = cx - x, cy - y
        pix = lambda c, r: (
            image[r, c] if (0 <= c < W and 0 <= r < H) else np.zeros(C)
        )
        out[idx] = (
            dx * dy * pix(fx, fy)
            + dx * (1 - dy) * pix(fx, cy)
            + (1 - dx) * dy * pix(cx, fy)
            + (1 - dx) * (1 - dy) * pix(cx, cy)
        )
    return out


def grid_f32lin(t, osize, ssize):
    # scae_sampling_grid with output pixel coords rounded to float32 as in sonnet
    a, b, tx, c, d, ty = t
    inv = np.linalg.inv(np.array([[a, b], [c, d]]))
    H, W = osize
    xs = np.linspace(-1, 1, W, dtype=np.float32).astype(np.float64)
    ys = np.linspace(-1, 1, H, dtype=np.float32).astype(np.float64)
    sx = np.float32((ssize[1] - 1) * 0.5)
    sy = np.float32((ssize[0] - 1) * 0.5)
    g = np.zeros((H, W, 2))
    for r in range(H):
        for cc in range(W):
            Ainv = np.concatenate(
                [inv, -(inv @ np.array([tx, ty]))[:, None]], 1
            )
            psi = np.array([xs[cc], ys[r], 1.0], np.float32)
            g[r, cc] = [
                Ainv[0] @ (psi * sx).astype(np.float64) + float(sx),
                Ainv[1] @ (psi * sy).astype(np.float64) + float(sy),
            ]
    return g


B, K, ts, os_ = 3, 5, (11, 11), (40, 40)
tmpl = rng.rand(B, K, 11, 11, 1)
params = rng.randn(B, K, 6) * 2
tf.reset_default_graph()
pose = math_ops.geometric_transform(tf.constant(params, tf.float64), False)
w = snt.AffineGridWarper(os_, ts).inverse()
grid = snt.BatchApply(w)(pose)
out = snt.BatchApply(tf.contrib.resampler.resampler)(tf.constant(tmpl), grid)
pose, grid, out = run([pose, grid, out])
g32 = np.stack(
    [
        np.stack([grid_f32lin(pose[b, k], os_, ts) for k in range(K)])
        for b in range(B)
    ]
)
print("grid vs ref-with-float32-linspace: max abs", np.abs(g32 - grid).max())
ref = np.stack(
    [
        np.stack([R.scae_resample(tmpl[b, k], grid[b, k]) for k in range(K)])
        for b in range(B)
    ]
)
ref32 = np.stack(
    [
        np.stack([resample_f32floor(tmpl[b, k], grid[b, k]) for k in range(K)])
        for b in range(B)
    ]
)
print(
    "resampler on official grid: vs scae_resample max abs",
    np.abs(ref - out).max(),
    " vs f32-floor variant",
    np.abs(ref32 - out).max(),
)
