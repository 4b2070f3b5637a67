"""Count trainable params of the official SCAE MNIST config (graph build only)."""

import collections
import sys
import types


# capsules/data/image.py and capsules/plot.py import matplotlib / sklearn at module
# level (and capsules/eval.py imports scipy.optimize / sklearn.cluster for the
# constellation bipartite-match eval), but they are only used inside plotting functions (make_plot), which this
# script never calls. The venv lacks them, so stub them if absent (no graph effect).
def _stub(name, **attrs):
    try:
        __import__(name)
    except ImportError:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, m)


_stub("matplotlib")
_stub("matplotlib.pyplot")
_stub("sklearn")
_stub("sklearn.manifold", TSNE=None)
_stub("sklearn.cluster")
_stub("scipy")
_stub("scipy.optimize", linear_sum_assignment=None)
_stub("PIL")
_stub("PIL.Image")  # capsules/train/hooks.py (image summaries only)

from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from stacked_capsule_autoencoders.capsules.configs import data_config  # noqa: F401  (defines batch_size, canvas_size)
from stacked_capsule_autoencoders.capsules.configs import model_config
from stacked_capsule_autoencoders.capsules.train import tools

# Flags that train.py defines itself (we don't import train.py to keep it minimal).
flags.DEFINE_string("dataset", "mnist", "")
flags.DEFINE_string("model", "scae", "")
flags.DEFINE_string("name", None, "")

ARGV = [
    "count.py",
    "--name=mnist",
    "--model=scae",
    "--dataset=mnist",
    "--batch_size=128",
    "--lr=3e-5",
    "--use_lr_schedule=True",
    "--canvas_size=40",
    "--n_part_caps=40",
    "--n_obj_caps=32",
    "--colorize_templates=True",
    "--use_alpha_channel=True",
    "--posterior_between_example_sparsity_weight=0.2",
    "--posterior_within_example_sparsity_weight=0.7",
    "--prior_between_example_sparsity_weight=0.35",
    "--prior_within_example_constant=4.3",  # undefined flag -> dropped by known_only
    "--prior_within_example_sparsity_weight=2.",
    "--color_nonlin=sigmoid",
    "--template_nonlin=sigmoid",
]

FLAGS = flags.FLAGS
unparsed = FLAGS(ARGV, known_only=True)
print("unparsed (ignored) args:", unparsed[1:])
logging.set_verbosity(logging.INFO)

B, S = FLAGS.batch_size, FLAGS.canvas_size


def make_batch(prefix):
    return {
        "image": tf.placeholder(
            tf.float32, [B, S, S, 1], name=prefix + "_image"
        ),
        "label": tf.placeholder(tf.int64, [B], name=prefix + "_label"),
    }


with tf.Graph().as_default():
    model_dict = model_config.get(FLAGS)
    model, opt = model_dict.model, model_dict.opt
    tf.train.get_or_create_global_step()

    trainset = make_batch("train")
    validset = make_batch("valid")

    target, gvs = model.make_target(trainset, opt)
    n_after_target = len(tf.trainable_variables())
    model.make_report(trainset)
    model.make_report(validset)

    tvars = tf.trainable_variables()
    print(
        "trainable vars after make_target: %d; after both make_report: %d"
        % (n_after_target, len(tvars))
    )

    tools.log_num_params()  # official logging (absl INFO)
    total = sum(int(np.prod(v.shape.as_list(), dtype=int)) for v in tvars)

    by_scope = collections.OrderedDict()
    for v in tvars:
        top = v.name.split("/")[0]
        n = int(np.prod(v.shape.as_list(), dtype=int))
        c, p = by_scope.get(top, (0, 0))
        by_scope[top] = (c + 1, p + n)

    print(
        "\nTOTAL trainable params: {:,} in {} variables".format(
            total, len(tvars)
        )
    )
    print("\nPer top-level scope (n_vars, n_params):")
    for k, (c, p) in by_scope.items():
        print("  {:40s} {:3d} {:>12,}".format(k, c, p))
    print("\nFull list:")
    for v in tvars:
        print(
            "  {:90s} {!s:20s} {:>10,}".format(
                v.name,
                v.shape.as_list(),
                int(np.prod(v.shape.as_list(), dtype=int)),
            )
        )
