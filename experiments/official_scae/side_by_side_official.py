"""The official side of a side-by-side training run (Python 3.7).

Builds the graph of the official `train.py` with the flags of
`run_mnist.sh` (`parity_official.build`, the presence noise on as in
training), loads the initial weights `side_by_side_ours.py` wrote for the
seed (`init_seed<SEED>.npz`, through the variable table), and trains on
the batches of `side_by_side.batch`. Under `--out`:

- `official_seed<SEED>/`: a `tf.train.Saver` checkpoint of every variable
  (RMSProp's slots and the global step included) after every evaluation
  and the last step; a later run resumes from it;
- `curves.jsonl`: every `--log-every` steps the mean loss of those steps
  and the terms of the last batch (from one more forward pass, with its
  own noise); every `--eval-every` steps the probes' accuracies on the
  fixed test canvases (a second connection of the model with the presence
  noise off) and, in `eval_official_seed<SEED>_<STEP>.npz`, the prior
  presences and posterior part masses that `side_by_side_compare.py`
  clusters (k-means in the package's environment).

    PYTHONPATH=/tmp/scae_official /tmp/tf115/bin/python \\
        side_by_side_official.py --seed 0 --steps 3000 --threads 2
"""

from __future__ import print_function

import argparse
import os
import sys
import time

import numpy as np

# TensorFlow's BFC CPU allocator unless the environment says otherwise, as
# step_timing gives both codes: on one core the official step takes about
# 2 s with it, 3 s without. Set before parity_official imports TensorFlow.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import side_by_side  # noqa: E402
from parity_official import build  # noqa: E402
from parity_official import load_initial_weights  # noqa: E402
from parity_official import tf  # noqa: E402


def eval_graph(model, size):
    """The model connected again on a placeholder batch with the presence
    noise off; returns the placeholders and the fetches."""
    model._primary_encoder._noise_scale = 0.0
    model._decoder._capsule_kwargs["noise_type"] = None
    model._decoder._capsule_kwargs["noise_scale"] = 0.0
    batch = {
        "image": tf.placeholder(tf.float32, [size, 40, 40, 1]),
        "label": tf.placeholder(tf.int64, [size]),
    }
    res = model.connect(batch)
    fetches = {
        "prior_presence": res.caps_presence_prob,
        "posterior_presence": tf.reduce_sum(res.posterior_mixing_probs, 1),
        "prior_probe": res.prior_cls_acc,
        "posterior_probe": res.posterior_cls_acc,
    }
    return batch, fetches


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    side_by_side.add_arguments(parser)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    images, labels = side_by_side.read_mnist(args.mnist, "train")
    test_x, test_y = side_by_side.test_canvases(
        *(side_by_side.read_mnist(args.mnist, "t10k") + (args.test_images,))
    )
    init = np.load(os.path.join(args.out, "init_seed%d.npz" % args.seed))
    folder = os.path.join(args.out, "official_seed%d" % args.seed)
    curves = os.path.join(args.out, "curves.jsonl")
    record = {"side": "official", "seed": args.seed}
    with tf.Graph().as_default():
        batch, target, _, train_op, terms, _, model = build(
            side_by_side.BATCH, side_by_side.CANVAS, True, return_model=True
        )
        variables = tf.trainable_variables()
        count = len(tf.global_variables())
        eval_batch, eval_fetches = eval_graph(model, args.eval_batch)
        if len(tf.global_variables()) != count:
            raise SystemExit("the evaluation graph created variables")
        saver = tf.train.Saver(max_to_keep=1)
        step_op = tf.train.get_global_step()
        config = tf.ConfigProto(
            intra_op_parallelism_threads=args.threads,
            inter_op_parallelism_threads=args.threads,
        )
        with tf.Session(config=config) as sess:
            latest = tf.train.latest_checkpoint(folder)
            if latest:
                saver.restore(sess, latest)
            else:
                sess.run(tf.global_variables_initializer())
                load_initial_weights(sess, variables, init)

            def evaluate(step):
                outputs = {k: [] for k in eval_fetches}
                for i in range(0, len(test_x), args.eval_batch):
                    feed = {
                        eval_batch["image"]: test_x[i : i + args.eval_batch],
                        eval_batch["label"]: test_y[i : i + args.eval_batch],
                    }
                    for k, v in sess.run(eval_fetches, feed).items():
                        outputs[k].append(v)
                np.savez(
                    os.path.join(
                        args.out,
                        "eval_official_seed%d_%d.npz" % (args.seed, step),
                    ),
                    prior_presence=np.concatenate(outputs["prior_presence"]),
                    posterior_presence=np.concatenate(
                        outputs["posterior_presence"]
                    ),
                    labels=test_y,
                )
                test = {
                    k: float(np.mean(outputs[k]))
                    for k in ("prior_probe", "posterior_probe")
                }
                side_by_side.append(
                    curves, dict(record, step=step, test=test)
                )

            done = int(sess.run(step_op))
            if done == 0:
                evaluate(0)
            losses, start = [], time.time()
            for step in range(done, args.steps):
                x, y = side_by_side.batch(images, labels, args.seed, step)
                feed = {batch["image"]: x, batch["label"]: y}
                loss, _ = sess.run([target, train_op], feed)
                losses.append(float(loss))
                if (step + 1) % args.log_every == 0:
                    values = sess.run(terms, feed)
                    side_by_side.append(
                        curves,
                        dict(
                            record,
                            step=step + 1,
                            mean_loss=float(np.mean(losses)),
                            terms={k: float(v) for k, v in values.items()},
                            seconds=round(time.time() - start, 1),
                        ),
                    )
                    losses = []
                    print("step %d loss %.3f" % (step + 1, loss))
                    sys.stdout.flush()
                if (step + 1) % args.eval_every == 0:
                    evaluate(step + 1)
                if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
                    saver.save(
                        sess, os.path.join(folder, "model"), global_step=step + 1
                    )


if __name__ == "__main__":
    main()
