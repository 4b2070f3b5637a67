from common import *

rng = np.random.RandomState(2)


def official(
    images,
    templates,
    presence,
    bg_value,
    temperature,
    scale,
    dt,
    logits=None,
    bg_logit=None,
):
    """primary.py TemplateBasedImageDecoder._build lines 235-281 with the
    learned scalars passed in (bg_value = sigmoid(bg_var), temperature =
    softplus(t+.5)+1e-4, scale = softplus(s)+1e-4 or 1.).  If logits is given
    (generic case) the mixing logits are (logits ++ bg_logit) instead of
    transformed_templates / temperature."""
    transformed_templates = tf.constant(templates, dt)
    batch_size = int(transformed_templates.shape[0])
    bg_image = tf.constant(bg_value, dt)
    bg_image = tf.zeros_like(transformed_templates[:, :1]) + bg_image
    transformed_templates = tf.concat([transformed_templates, bg_image], axis=1)
    presence = tf.constant(presence, dt)
    presence = tf.concat(
        [presence, tf.ones([batch_size, 1], dtype=dt)], axis=1
    )  # primary.py:251 (float32 there)
    if logits is None:
        template_mixing_logits = transformed_templates / tf.constant(
            temperature, dt
        )
    else:
        lg = tf.constant(logits, dt)
        template_mixing_logits = tf.concat(
            [lg, tf.zeros_like(lg[:, :1]) + tf.constant(bg_logit, dt)], 1
        )
    template_mixing_logits += make_brodcastable(
        math_ops.safe_log(presence), template_mixing_logits
    )
    sc = scale if isinstance(scale, float) else tf.constant(scale, dt)
    rec_pdf = prob.MixtureDistribution(
        template_mixing_logits, [transformed_templates, sc], tfd.Normal
    )
    lp = rec_pdf.log_prob(tf.constant(images, dt))
    if dt == tf.float64:
        # prob.py:114 tf.one_hot defaults to float32 and cannot multiply a
        # float64 mode; only for the float64 run, give one_hot dtype float64
        # (the mask is exact 0/1, the argmax is unchanged)
        _oh = tf.one_hot
        tf.one_hot = lambda *a, **k: _oh(*a, dtype=tf.float64, **k)
        try:
            mode = rec_pdf.mode()
        finally:
            tf.one_hot = _oh
    else:
        mode = rec_pdf.mode()
    return lp, mode


def one(name, B, K, H, W, C, presence, scale=1.0, generic=False, tied=False):
    templates = rng.rand(B, K, H, W, C)
    templates[templates < 0.4] = (
        0.0  # many exact zeros, as after warping outside the support
    )
    if tied:
        templates[:, 1] = templates[:, 0]
    images = rng.rand(B, H, W, C)
    bg_value = 1.0 / (1.0 + np.exp(-rng.randn()))
    temperature = np.log1p(np.exp(rng.randn() + 0.5)) + 1e-4
    if generic:
        logits = rng.randn(B, K, H, W, C) * 3
        bg_logit = rng.randn()
    else:
        logits = templates / temperature
        bg_logit = bg_value / temperature
    for dt in (tf.float64, tf.float32):
        tf.reset_default_graph()
        lp, mode = official(
            images,
            templates,
            presence,
            bg_value,
            temperature,
            scale,
            dt,
            logits if generic else None,
            bg_logit if generic else None,
        )
        lp, mode = run([lp, mode])
        cast = (
            (lambda a: a)
            if dt == tf.float64
            else (lambda a: np.asarray(a, np.float32))
        )
        ref_lp = R.scae_image_log_likelihood(
            cast(images),
            cast(templates),
            cast(logits),
            cast(presence),
            cast(bg_value),
            cast(bg_logit),
            cast(scale),
        )
        ref_mode = R.scae_image_mode(
            cast(templates),
            cast(logits),
            cast(presence),
            cast(bg_value),
            cast(bg_logit),
        )
        record(
            "scae_image_log_likelihood",
            "prob.MixtureDistribution.log_prob",
            name,
            dt.name,
            ref_lp,
            lp,
        )
        record(
            "scae_image_mode",
            "prob.MixtureDistribution.mode",
            name,
            dt.name + ("(one_hot f64)" if dt == tf.float64 else ""),
            ref_mode,
            mode,
        )


B, K = 4, 6
pres = rng.rand(B, K)
pres0 = pres.copy()
pres0[0, 2] = 0.0
pres0[1, :3] = 0.0
pres0[2, :] = 0.0
pres0[3, 0] = 1.0
pres0[3, 1] = 1e-17
one("B4 K6 40x40x1, presence U(0,1)", B, K, 40, 40, 1, pres)
one(
    "B4 K6 40x40x1, presence with exact 0 / all-0 row / 1 / 1e-17",
    B,
    K,
    40,
    40,
    1,
    pres0,
)
one(
    "B4 K6 12x12x3, presence with zeros, scale=0.37",
    B,
    K,
    12,
    12,
    3,
    pres0,
    scale=0.37,
)
one(
    "B4 K6 12x12x1, generic logits + bg_logit, zeros",
    B,
    K,
    12,
    12,
    1,
    pres0,
    generic=True,
)
one(
    "B4 K6 12x12x1, all presence 1, tied tmpl 0==1",
    B,
    K,
    12,
    12,
    1,
    np.ones((B, K)),
    tied=True,
)


# tie-breaking: every mixing logit equal (generic logits all 0, bg_logit 0, presence 1) but templates differ
def tie_case():
    B, K, H, W, C = 2, 4, 6, 6, 1
    templates = rng.rand(B, K, H, W, C)
    images = rng.rand(B, H, W, C)
    logits = np.zeros((B, K, H, W, C))
    pres = np.ones((B, K))
    for dt in (tf.float64, tf.float32):
        tf.reset_default_graph()
        lp, mode = official(
            images, templates, pres, 0.3, 1.0, 1.0, dt, logits, 0.0
        )
        lp, mode = run([lp, mode])
        ref_mode = R.scae_image_mode(templates, logits, pres, 0.3, 0.0)
        record(
            "scae_image_mode",
            "prob.MixtureDistribution.mode",
            "all mixing logits tied, distinct templates",
            dt.name,
            ref_mode,
            mode,
        )


tie_case()
