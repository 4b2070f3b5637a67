# per-pixel background image (primary.py:247-248 bg_image path; unused by the official models)
from common import *

rng = np.random.RandomState(7)
B, K, H, W, C = 3, 4, 8, 8, 1
templates = rng.rand(B, K, H, W, C)
images = rng.rand(B, H, W, C)
bg = rng.rand(B, H, W, C)
pres = rng.rand(B, K)
pres[0, 1] = 0
temperature = 0.7
tf.reset_default_graph()
tt = tf.constant(templates)
bg_image = tf.expand_dims(tf.constant(bg), axis=1)  # primary.py:248
tt = tf.concat([tt, bg_image], axis=1)
p = tf.concat([tf.constant(pres), tf.ones([B, 1], tf.float64)], 1)
logits = tt / temperature + make_brodcastable(math_ops.safe_log(p), tt)
pdf = prob.MixtureDistribution(logits, [tt, 1.0], tfd.Normal)
lp = run(pdf.log_prob(tf.constant(images)))
for name, bgr in [
    ("background passed as [B,1,H,W,C]", bg[:, None]),
    ("background passed as [B,H,W,C]", bg),
]:
    try:
        ref = R.scae_image_log_likelihood(
            images,
            templates,
            templates / temperature,
            pres,
            bgr,
            bgr / temperature,
            1.0,
        )
        record(
            "scae_image_log_likelihood",
            "MixtureDistribution.log_prob (bg_image path)",
            name,
            "float64",
            ref,
            lp,
        )
    except Exception as e:
        print(name, "->", type(e).__name__, e)
