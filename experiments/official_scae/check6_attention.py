from common import *

rng = np.random.RandomState(5)


def weights(q, k, presence):
    """QKVAttention with values = identity, so the output IS the routing matrix."""
    tf.reset_default_graph()
    B, M = k.shape[:2]
    vals = np.tile(np.eye(M)[None], (B, 1, 1)).astype(np.float32)
    out = attention.QKVAttention()(
        tf.constant(q, tf.float32),
        tf.constant(k, tf.float32),
        tf.constant(vals),
        None if presence is None else tf.constant(presence, tf.float32),
    )
    return run(out)


B, N, M, d = 4, 5, 9, 16
q = rng.randn(B, N, d).astype(np.float32)
k = rng.randn(B, M, d).astype(np.float32)


def report(name, pres):
    w = weights(q, k, pres)
    p32 = pres.astype(np.float32)
    top = p32.max(1, keepdims=True)
    on_top = np.where(p32 == top, 1.0, 0.0)[
        :, None, :
    ]  # keys holding the max presence
    print(
        "%-60s max weight %.9f | min over queries of weight on max-presence key(s) %.9f | weight on others max %.3e"
        % (name, w.max(), (w * on_top).sum(-1).min(), (w * (1 - on_top)).max())
    )
    return w


report("presence all exactly 1.0 (= plain softmax)", np.ones((B, M)))
report("presence U(0,1)", rng.rand(B, M))
report("presence U(0.9,0.99)", rng.uniform(0.9, 0.99, (B, M)))
p = rng.rand(B, M)
p[:, 3] = 0.5
p[:, 4] = np.nextafter(np.float32(0.5), np.float32(0))
p[:, :3] = 0.1
p[:, 5:] = 0.2
report("presence: max 0.5 vs 0.5-ulp (3e-8 apart; 1-p rounds equal)", p)
p[:, 4] = np.nextafter(np.float32(0.5), np.float32(1))
report("presence: max 0.5+ulp (key 4) vs 0.5 (6e-8 apart)", p)
p = rng.rand(B, M) * 0.5
p[:, [1, 4, 7]] = 1.0
w = report("presence: three keys exactly 1.0, others U(0,0.5)", p)
sm = np.exp(np.einsum("bnd,bmd->bnm", q, k)[:, :, [1, 4, 7]] / np.sqrt(d))
sm /= sm.sum(-1, keepdims=True)
print(
    "    -> weights over the three 1.0 keys equal the plain softmax over those keys: max |diff| %.3e; min/max of those weights %.3f/%.3f"
    % (
        np.abs(w[:, :, [1, 4, 7]] - sm).max(),
        w[:, :, [1, 4, 7]].min(),
        w[:, :, [1, 4, 7]].max(),
    )
)
p = np.full((B, M), 0.5)
w = report("presence: all keys equal 0.5", p)
print(
    "    -> uniform? max |w - 1/M| = %.3e (q.k is absorbed by the -5e31 offset in float32)"
    % np.abs(w - 1.0 / M).max()
)
p = np.full((B, M), 0.5)
p[:, 2] = 0.0
w = report("presence: all 0.5 but key 2 = 0", p)
print(
    "    -> weight on key 2: %.3e, on others max |w-1/(M-1)| %.3e"
    % (w[:, :, 2].max(), np.abs(np.delete(w, 2, -1) - 1.0 / (M - 1)).max())
)

# the whole official SetTransformer (random init) with float presence: fetch every softmax in the graph
tf.reset_default_graph()
x = tf.constant(rng.randn(B, M, 10).astype(np.float32))
pres = tf.constant(rng.rand(B, M).astype(np.float32))
st = attention.SetTransformer(
    n_layers=3, n_heads=2, n_dims=16, n_output_dims=8, n_outputs=4
)
out = st(x, pres)
sms = [
    op.outputs[0]
    for op in tf.get_default_graph().get_operations()
    if op.type == "Softmax"
]
with tf.Session() as s:
    s.run(tf.global_variables_initializer())
    vals, pv = s.run([sms, pres])
am = pv.argmax(1)
for t, v in zip(sms, vals):
    wt = (
        v[np.arange(B), :, am]
        if False
        else np.stack([v[b, :, am[b]] for b in range(B)])
    )
    print(
        "SetTransformer %-70s max weight %.9f  min weight on argmax-presence key %.9f"
        % (t.name, v.max(), wt.min())
    )
