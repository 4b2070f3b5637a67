"""Count trainable params of the official SCAE MNIST config (graph build only)."""

import collections

from official_setup import RUN_MNIST
from official_setup import stub_unused_imports

# Imports of the official modules that the graph never uses.
stub_unused_imports()

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

ARGV = ["count.py"] + RUN_MNIST

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
