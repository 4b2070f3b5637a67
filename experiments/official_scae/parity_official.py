"""The official side of the SCAE gradient and optimizer-step parity check.

Python 3.7, TensorFlow 1.15.0, dm-sonnet 1.35, tensorflow-probability 0.8
and monty; the official code's parent folder on PYTHONPATH (default
/tmp/scae_official). Builds the official MNIST graph (the flags of
run_mnist.sh) with the presence noise off, loads the initial weights that
parity_export.py wrote (`init_weights.npz`, keyed by our weight paths)
into the 97 official variables through the table `MAPPING` below, and
writes `official.npz` under `--out`: on batch 0 the loss, its terms and
the gradient of every variable; then the loss and terms of each of
`--steps` steps of the official train op (RMSProp, as train.py applies
it) on the batches of `batches.npz`, and the weights after them. Arrays
are stored in our layout, keyed by our weight paths.

    PYTHONPATH=/tmp/scae_official python parity_official.py \
        --out /tmp/scae_parity
"""

from __future__ import print_function

import argparse
import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.environ.get("OFFICIAL_SCAE_PARENT", "/tmp/scae_official"))

from official_setup import RUN_MNIST  # noqa: E402
from official_setup import stub_unused_imports  # noqa: E402

stub_unused_imports()

import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402
from stacked_capsule_autoencoders.capsules.configs import data_config  # noqa: E402,F401
from stacked_capsule_autoencoders.capsules.configs import model_config  # noqa: E402
from stacked_capsule_autoencoders.capsules.train import tools  # noqa: E402

# train.py's own flags, with their defaults (train.py:39-74).
flags.DEFINE_string("dataset", "mnist", "")
flags.DEFINE_string("model", "scae", "")
flags.DEFINE_string("name", None, "")
flags.DEFINE_float("grad_value_clip", 0.0, "")
flags.DEFINE_float("grad_norm_clip", 0.0, "")


# Layout changes from ours to the official variable.
SAME = "same"
LEAD1 = "leading 1"  # ours (d...) -> official (1, d...)
LEAD2 = "leading 1, 1"  # ours (d...) -> official (1, 1, d...)
MID1 = "axis 1"  # ours (a, b) -> official (a, 1, b)
TAIL1 = "trailing 1"  # ours (a,) -> official (a, 1)

ST = "set_transformer/"
OE = "object_encoder/"
CL = "image_capsule/capsule_layer/"
OD = "object_decoder/"


def _attention(official, ours):
    """The q, k, v and output Linears of one MultiHeadQKVAttention (one
    head): attention.py:115-117 names them linear, linear_1, linear_2 in
    the order queries, keys, values (:121); the output one, linear_3
    (:126)."""
    rows = []
    for suffix, name in [
        ("linear", "query_0"),
        ("linear_1", "key_0"),
        ("linear_2", "value_0"),
        ("linear_3", "output"),
    ]:
        for w, k in [("w", "kernel"), ("b", "bias")]:
            rows.append(
                (
                    official + suffix + "/" + w,
                    ours + name + "/" + k,
                    SAME,
                )
            )
    return rows


def _block(index):
    """One SelfAttention block (attention.py:139-165)."""
    official = ST + "self_attention" + ("_%d" % index if index else "") + "/"
    ours = OE + "block_%d/" % index
    rows = _attention(
        official + "multi_head_qkv_attention/", ours + "attention/"
    )
    rows += [
        (official + "layer_norm/gamma", ours + "norm_1/gamma", SAME),
        (official + "layer_norm/beta", ours + "norm_1/beta", SAME),
        (official + "mlp/linear_0/w", ours + "hidden/kernel", SAME),
        (official + "mlp/linear_0/b", ours + "hidden/bias", SAME),
        (official + "mlp/linear_1/w", ours + "projection/kernel", SAME),
        (official + "mlp/linear_1/b", ours + "projection/bias", SAME),
        (official + "layer_norm_1/gamma", ours + "norm_2/gamma", SAME),
        (official + "layer_norm_1/beta", ours + "norm_2/beta", SAME),
    ]
    return rows


# (official variable name, our weight path, layout change).
MAPPING = (
    # Part encoder: ConvNet2D (model_config.py:98-103) and the conv_att
    # head (primary.py:80, 88). The head's 960 channels are read alike:
    # 23 x 40 values as (value, part), then 40 attention logits.
    [
        (
            "conv_net_2d/conv_2d_%d/%s" % (i, w),
            "part_encoder/conv_%d/%s" % (i, k),
            SAME,
        )
        for i in range(4)
        for w, k in [("w", "kernel"), ("b", "bias")]
    ]
    + [
        ("capsule_image_encoder/add/b", "part_encoder/feature_bias", SAME),
        ("capsule_image_encoder/conv_2d/w", "part_encoder/head/kernel", SAME),
        ("capsule_image_encoder/conv_2d/b", "part_encoder/head/bias", SAME),
    ]
    # Part decoder (primary.py:185, 190-194, 203, 250, 265-266).
    + [
        (
            "template_based_image_decoder/templates",
            "template_decoder/template_logits",
            LEAD1,
        ),
        (
            "template_based_image_decoder/templates_alpha",
            "template_decoder/template_alpha",
            LEAD1,
        ),
        (
            "template_based_image_decoder/mlp/linear_0/w",
            "template_decoder/color_hidden/kernel",
            SAME,
        ),
        (
            "template_based_image_decoder/mlp/linear_0/b",
            "template_decoder/color_hidden/bias",
            SAME,
        ),
        (
            "template_based_image_decoder/mlp/linear_1/w",
            "template_decoder/color_output/kernel",
            SAME,
        ),
        (
            "template_based_image_decoder/mlp/linear_1/b",
            "template_decoder/color_output/bias",
            SAME,
        ),
        (
            "template_based_image_decoder/bg_value",
            "template_decoder/background_value",
            SAME,
        ),
        (
            "template_based_image_decoder/bg_mixing_logit",
            "template_decoder/background_logit",
            SAME,
        ),
    ]
    # Object encoder (attention.py:52, 61-70).
    + [
        (ST + "linear/w", OE + "input_map/kernel", SAME),
        (ST + "linear/b", OE + "input_map/bias", SAME),
    ]
    + _block(0)
    + _block(1)
    + _block(2)
    + [
        (ST + "linear_1/w", OE + "output_map/kernel", SAME),
        (ST + "linear_1/b", OE + "output_map/bias", SAME),
        (ST + "inducing_points", OE + "seeds", LEAD1),
    ]
    + _attention(ST + "multi_head_qkv_attention/", OE + "pooling/")
    # Object decoder (capsule.py:103, 134, 143, 149-151, 420; neural.py:73,
    # 87-89). BatchLinear weights are (1, caps, in, out), ours (caps, in,
    # out); the caps MLP's 327 outputs are split alike (capsule.py:121-127):
    # 240 dynamic OP, 6 OV, 1 capsule presence, 40 vote presences, 40
    # scales.
    + [
        (
            CL + "batch_mlp/batch_linear/weights",
            OD + "params_hidden_kernel",
            LEAD1,
        ),
        (CL + "batch_mlp/batch_linear/add/b", OD + "params_hidden_bias", SAME),
        (
            CL + "batch_mlp/batch_linear_1/weights",
            OD + "params_output_kernel",
            LEAD1,
        ),
        (
            CL + "batch_mlp/batch_linear_1/add/b",
            OD + "params_output_bias",
            SAME,
        ),
        (
            CL + "batch_mlp_1/batch_linear/weights",
            OD + "caps_hidden_kernel",
            LEAD1,
        ),
        (CL + "batch_mlp_1/batch_linear/add/b", OD + "caps_hidden_bias", SAME),
        (
            CL + "batch_mlp_1/batch_linear_1/weights",
            OD + "caps_output_kernel",
            LEAD1,
        ),
        (CL + "add/b", OD + "pose_bias", MID1),
        (CL + "add_1/b", OD + "presence_bias", TAIL1),
        (CL + "add_2/b", OD + "vote_presence_bias", SAME),
        (CL + "add_3/b", OD + "vote_scale_bias", SAME),
        (CL + "cpr_static", OD + "static_relations", LEAD1),
        (
            "image_capsule/capsule_likelihood/dummy_vote",
            OD + "dummy_vote",
            LEAD2,
        ),
    ]
    # Probes (scae.py:303-312): the first classification_probe call
    # reads the posterior mass, the second the prior presences. snt.Module
    # takes its scope from the wrapped function, `_classification_probe`
    # (probe.py:30, 41), stripped of its underscore.
    + [
        (
            "image_autoencoder/classification_probe/linear/w",
            "posterior_probe/kernel",
            SAME,
        ),
        (
            "image_autoencoder/classification_probe/linear/b",
            "posterior_probe/bias",
            SAME,
        ),
        (
            "image_autoencoder/classification_probe_1/linear/w",
            "prior_probe/kernel",
            SAME,
        ),
        (
            "image_autoencoder/classification_probe_1/linear/b",
            "prior_probe/bias",
            SAME,
        ),
    ]
)


def to_official(value, change):
    if change == SAME:
        return value
    if change == LEAD1:
        return value[None]
    if change == LEAD2:
        return value[None, None]
    if change == MID1:
        return value[:, None, :]
    if change == TAIL1:
        return value[:, None]
    raise ValueError(change)


def to_ours(value, change):
    if change == SAME:
        return value
    if change == LEAD1:
        return value[0]
    if change == LEAD2:
        return value[0, 0]
    if change == MID1:
        return value[:, 0, :]
    if change == TAIL1:
        return value[:, 0]
    raise ValueError(change)


def check_mapping(variables, init):
    """Every official variable and every weight of ours, once each."""
    official = [v.op.name for v in variables]
    names = [row[0] for row in MAPPING]
    paths = [row[1] for row in MAPPING]
    problems = []
    for what, listed in [("official name", names), ("our path", paths)]:
        twice = sorted(set(n for n in listed if listed.count(n) > 1))
        if twice:
            problems.append("%s mapped twice: %s" % (what, twice))
    missing = sorted(set(official) - set(names))
    unknown = sorted(set(names) - set(official))
    ours_missing = sorted(set(init.files) - set(paths))
    ours_unknown = sorted(set(paths) - set(init.files))
    for label, items in [
        ("official variables not mapped", missing),
        ("mapped names not in the graph", unknown),
        ("our weights not mapped", ours_missing),
        ("mapped paths not among our weights", ours_unknown),
    ]:
        if items:
            problems.append("%s: %s" % (label, items))
    if len(official) != 97:
        problems.append("%d official variables, not 97" % len(official))
    if problems:
        raise SystemExit("MAPPING is wrong:\n  " + "\n  ".join(problems))


def build(batch_size, size, noise=False, return_model=False):
    """The training graph of `train.py` on placeholders: `(batch, target,
    gvs, train_op, terms, opt)`, and the official model last with
    `return_model`."""
    flags.FLAGS(["parity_official.py"] + RUN_MNIST, known_only=True)
    config = flags.FLAGS
    model_dict = model_config.get(config)
    model, opt = model_dict.model, model_dict.opt
    # The presence noise off unless `noise`. The part encoder adds it
    # when its noise_scale (primary.py:49, 108-110; make_scae does not set
    # it, so 4.) is positive; the object decoder's CapsuleLayer adds none when
    # noise_type is None (capsule.py:153-172; make_scae passes
    # noise_type='uniform', noise_scale=4., model_config.py:141-142).
    capsule_kwargs = model._decoder._capsule_kwargs
    if (
        model._primary_encoder._noise_scale != 4.0
        or capsule_kwargs.get("noise_type") != "uniform"
    ):
        raise SystemExit("the official noise settings are not as expected")
    if not noise:
        model._primary_encoder._noise_scale = 0.0
        capsule_kwargs["noise_type"] = None
        capsule_kwargs["noise_scale"] = 0.0

    global_step = tf.train.get_or_create_global_step()
    batch = {
        "image": tf.placeholder(tf.float32, [batch_size, size, size, 1]),
        "label": tf.placeholder(tf.int64, [batch_size]),
    }
    # As train.py:112-124 and 173-178.
    target, gvs = model.make_target(batch, opt)
    if gvs is not None:
        raise SystemExit("make_target returned gradients (train.py:114)")
    gvs = opt.compute_gradients(target)
    gvs = tools.clip_gradients(
        gvs,
        value_clip=config.grad_value_clip,
        norm_clip=config.grad_norm_clip,
    )
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    if update_ops:
        raise SystemExit("unexpected UPDATE_OPS: %s" % update_ops)
    train_op = opt.apply_gradients(gvs, global_step=global_step)

    res = model.connect(batch)
    # Our term names: the official values (the official prior "between"
    # term is the negated l2, capsule.py:495-496, subtracted in the loss).
    terms = {
        "image_log_likelihood": res.rec_ll,
        "part_log_likelihood": res.log_prob,
        "dynamic_l2": res.dynamic_weights_l2,
        "prior_within_sparsity": res.prior_within_sparsity_loss,
        "prior_between_sparsity": -res.prior_between_sparsity_loss,
        "posterior_within_sparsity": res.posterior_within_sparsity_loss,
        "posterior_between_sparsity": res.posterior_between_sparsity_loss,
        "prior_probe_loss": res.prior_cls_xe,
        "posterior_probe_loss": res.posterior_cls_xe,
        "prior_probe_accuracy": res.prior_cls_acc,
        "posterior_probe_accuracy": res.posterior_cls_acc,
    }
    if return_model:
        return batch, target, gvs, train_op, terms, opt, model
    return batch, target, gvs, train_op, terms, opt


def load_initial_weights(sess, variables, init):
    """Loads our weights `init` (by our weight paths) into the official
    `variables` through `MAPPING`; returns `(variable, path, change)` of
    every mapped variable."""
    check_mapping(variables, init)
    by_name = {v.op.name: v for v in variables}
    rows = [(by_name[n], p, c) for n, p, c in MAPPING]
    for variable, path, change in rows:
        value = to_official(init[path], change)
        if tuple(value.shape) != tuple(variable.shape.as_list()):
            raise SystemExit(
                "%s: %s, ours %s -> %s"
                % (variable.op.name, variable.shape.as_list(), path, value.shape)
            )
        variable.load(value, sess)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="/tmp/scae_parity")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also write the weights after every step (trace_official.npz)",
    )
    args = parser.parse_args()
    start = time.time()
    data = np.load(os.path.join(args.out, "batches.npz"))
    images, labels = data["images"], data["labels"]
    init = np.load(os.path.join(args.out, "init_weights.npz"))

    graph = tf.Graph()
    with graph.as_default():
        batch, target, gvs, train_op, terms, opt = build(
            images.shape[1], images.shape[2]
        )
        variables = tf.trainable_variables()
        grad_of = {v.op.name: g for g, v in gvs}
        slots = sorted(opt.get_slot_names())
        session_config = tf.ConfigProto(
            intra_op_parallelism_threads=1, inter_op_parallelism_threads=1
        )
        with tf.Session(config=session_config) as sess:
            sess.run(tf.global_variables_initializer())
            rows = load_initial_weights(sess, variables, init)
            rms = [opt.get_slot(v, "rms") for v, _, _ in rows]
            if not all(
                np.all(sess.run(s) == 1.0) for s in rms if s is not None
            ):
                raise SystemExit("RMSProp's rms slots do not start at 1")

            feed = {batch["image"]: images[0], batch["label"]: labels[0]}
            fetch_grads = [
                grad_of[v.op.name]
                for v, _, _ in rows
                if grad_of[v.op.name] is not None
            ]
            loss, term_values, grad_values = sess.run(
                [target, terms, fetch_grads], feed
            )
            result = {"loss": np.float64(loss)}
            for name, value in term_values.items():
                result["term/" + name] = np.float64(value)
            grad_values = iter(grad_values)
            for variable, path, change in rows:
                if grad_of[variable.op.name] is None:
                    # No gradient (dummy_vote): apply_gradients skips it.
                    result["grad/" + path] = np.zeros_like(init[path])
                    result["nograd/" + path] = np.array(True)
                else:
                    result["grad/" + path] = to_ours(next(grad_values), change)
            grad_time = time.time() - start

            step_loss, step_terms = [], []
            trace = [] if args.trace else None
            for i in range(args.steps):
                feed = {batch["image"]: images[i], batch["label"]: labels[i]}
                loss_i, terms_i, _ = sess.run([target, terms, train_op], feed)
                step_loss.append(loss_i)
                step_terms.append(terms_i)
                print("step %2d loss %.6f" % (i, loss_i))
                sys.stdout.flush()
                if trace is not None:
                    trace.append(sess.run([v for v, _, _ in rows]))
            if trace is not None:
                np.savez(
                    os.path.join(args.out, "trace_official.npz"),
                    **{
                        path: np.stack([to_ours(t[n], change) for t in trace])
                        for n, (_, path, change) in enumerate(rows)
                    },
                )
            result["step_loss"] = np.array(step_loss, np.float64)
            for name in terms:
                result["step_term/" + name] = np.array(
                    [t[name] for t in step_terms], np.float64
                )
            finals = sess.run([v for v, _, _ in rows])
            for (variable, path, change), value in zip(rows, finals):
                result["final/" + path] = to_ours(value, change)
                result["init/" + path] = init[path]
            result["optimizer"] = np.array(
                "RMSPropOptimizer lr=%r decay=%r momentum=%r epsilon=%r "
                "slots=%s"
                % (
                    opt._learning_rate,
                    opt._decay,
                    opt._momentum,
                    opt._epsilon,
                    slots,
                )
            )
    out = os.path.join(args.out, "official.npz")
    np.savez(out, **result)
    print(
        "official: loss %.6f; batch-0 gradients %.1f s, total %.1f s -> %s"
        % (result["loss"], grad_time, time.time() - start, out)
    )
    print(str(result["optimizer"]))


if __name__ == "__main__":
    main()
