"""Seconds per training step of the official SCAE code (Python 3.7).

Builds the graph of the official `train.py` with the flags of
`run_mnist.sh` (the presence noise on, as in training; `parity_official.
build`), then runs `--steps` timed steps of its train op (RMSProp) on one
fixed batch of random 40x40 canvases after `--warmup` untimed ones, with
`--threads` TensorFlow threads (intra- and inter-op). Prints one JSON line:
the median and every step's seconds. `step_time_ours.py` times the package
alike; run the two alternately on a quiet machine, pinned to the same
cores (`taskset -c 0` for one core):

    PYTHONPATH=/tmp/scae_official taskset -c 0 /tmp/tf115/bin/python \\
        step_time_official.py --threads 1
"""

from __future__ import print_function

import argparse

import numpy as np
import step_timing
from parity_official import build
from parity_official import tf


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    step_timing.add_arguments(parser, threads=1)
    args = parser.parse_args()
    rng = np.random.RandomState(0)
    images = rng.uniform(size=(args.batch_size, 40, 40, 1)).astype("float32")
    labels = rng.randint(0, 10, size=args.batch_size)
    with tf.Graph().as_default():
        batch, target, _, train_op, _, _ = build(args.batch_size, 40, True)
        feed = {batch["image"]: images, batch["label"]: labels}
        config = tf.ConfigProto(
            intra_op_parallelism_threads=args.threads,
            inter_op_parallelism_threads=args.threads,
        )
        with tf.Session(config=config) as sess:
            sess.run(tf.global_variables_initializer())
            seconds = step_timing.time_steps(
                lambda: sess.run(train_op, feed), args.warmup, args.steps
            )
    step_timing.print_record(step_timing.record("official", args, seconds))


if __name__ == "__main__":
    main()
