"""Images per second of the generators, on one core.

Times `datasets.multi_mnist.load` (the `tf.data` pipeline, with TensorFlow
and the pipeline restricted to one thread each) and `make_pairs` (NumPy),
after a warm-up, over whole epochs of `--pairs` pairs, and
`datasets.affine_mnist.transform` and `translate` on 10,000 digits. Run it
pinned to one core for the one-core figures:

    taskset -c 0 python -m benchmarks.multi_mnist_pipeline \\
        --data-dir path/to/mnist --json multi_mnist_pipeline.json

Without `--data-dir`, the digits are the embedded MNIST sample's and the
`tf.data` pipeline is not timed (it reads the MNIST files).
"""

import argparse
import json
import time

from benchmarks import common
from keras_capsules.datasets import affine_mnist
from keras_capsules.datasets import mnist
from keras_capsules.datasets import multi_mnist


def time_pipeline(args):
    """Pairs per second of one `tf.data` epoch after a warm-up epoch."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    dataset = multi_mnist.load(
        "train",
        batch_size=args.batch_size,
        num_pairs=args.pairs,
        seed=0,
        manual_dir=args.data_dir,
    )
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    dataset = dataset.with_options(options)
    rates = []
    for _ in range(args.repeats + 1):
        start = time.perf_counter()
        count = sum(int(x.shape[0]) for x, _ in dataset)
        rates.append(count / (time.perf_counter() - start))
    return rates[1:]


def time_numpy(args, images, labels):
    """Pairs per second of `make_pairs` building `--pairs` pairs."""
    rates = []
    for seed in range(args.repeats):
        start = time.perf_counter()
        multi_mnist.make_pairs(images, labels, args.pairs, seed=seed)
        rates.append(args.pairs / (time.perf_counter() - start))
    return rates


def time_affine(args, images):
    """Digits per second of `transform` and `translate` on 10,000 digits."""
    images = images[:10000]
    rates = {}
    for name in ("transform", "translate"):
        function = getattr(affine_mnist, name)
        rates[name] = []
        for seed in range(args.repeats):
            start = time.perf_counter()
            function(images, seed=seed)
            rates[name].append(len(images) / (time.perf_counter() - start))
    return rates


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, metavar="PATH")
    args = parser.parse_args(argv)
    if args.data_dir:
        images, labels = mnist.load_arrays("train", manual_dir=args.data_dir)
    else:
        images, labels = mnist.load_sample("train")
    row = {
        "benchmark": "multi_mnist_pipeline",
        "pairs_per_epoch": args.pairs,
        "batch_size": args.batch_size,
        "source_images": len(images),
        "tf_data_pairs_per_s": (time_pipeline(args) if args.data_dir else None),
        "make_pairs_pairs_per_s": time_numpy(args, images, labels),
        "affine_digits_per_s": time_affine(args, images),
        "environment": common.environment(),
    }
    print(json.dumps(row, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
