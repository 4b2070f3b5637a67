"""Our side of a side-by-side training run against the official SCAE code.

Trains `StackedCapsuleAutoencoder.from_preset("scae_mnist", seed=SEED)`
(after `keras.utils.set_random_seed(SEED)`) with `compile()`'s defaults
(the official RMSprop at 3e-5, the presence noise on as in training) on
the batches of `side_by_side.batch`, one `train_on_batch` a step, and
writes under `--out`:

- `init_seed<SEED>.npz`: the initial weights keyed by our weight paths
  (the first run writes it; `side_by_side_official.py` loads it, and so
  does a control run with `--noise-seed`: the same weights and batches,
  the presence noise of another seed, recorded as side
  `ours-noise<NOISE_SEED>`);
- `ours_seed<SEED>.keras`: the model and its optimizer after every
  evaluation and the last step (a later run resumes from it);
- `curves.jsonl`: every `--log-every` steps the mean loss of those steps
  and the terms of the last one; every `--eval-every` steps the scores on
  the fixed test canvases (`predict`, deterministic): each linear probe's
  accuracy and k-means accuracy (10 clusters, Hungarian matching) on the
  prior object presences and the posterior part mass of each object.

    KERAS_BACKEND=tensorflow python side_by_side_ours.py --seed 0 \\
        --steps 3000
"""

import argparse
import os
import sys
import time

import keras
import numpy as np
import side_by_side

from keras_capsules.models import StackedCapsuleAutoencoder

# The scores of the training-variant study (experiments/scae_variants.py).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scae_variants import score  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    side_by_side.add_arguments(parser)
    parser.add_argument(
        "--noise-seed",
        type=int,
        default=None,
        help="A control: the run of --seed (its initial weights and "
        "batches) with the presence noise of another seed.",
    )
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    images, labels = side_by_side.read_mnist(args.mnist, "train")
    test_x, test_y = side_by_side.test_canvases(
        *side_by_side.read_mnist(args.mnist, "t10k"), args.test_images
    )
    side = "ours"
    if args.noise_seed is not None:
        side = f"ours-noise{args.noise_seed}"
    saved = os.path.join(args.out, f"{side}_seed{args.seed}.keras")
    init = os.path.join(args.out, f"init_seed{args.seed}.npz")
    if os.path.exists(saved):
        model = keras.saving.load_model(saved)
    else:
        seed = args.seed if args.noise_seed is None else args.noise_seed
        keras.utils.set_random_seed(seed)
        model = StackedCapsuleAutoencoder.from_preset("scae_mnist", seed=seed)
        model.compile()
        if args.noise_seed is None:
            np.savez(
                init, **{v.path: np.asarray(v.numpy()) for v in model.weights}
            )
        else:
            weights = np.load(init)
            for variable in model.weights:
                variable.assign(weights[variable.path])
    done = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    record = {
        "side": side,
        "seed": args.seed,
        "backend": keras.backend.backend(),
    }
    curves = os.path.join(args.out, "curves.jsonl")
    if done == 0:
        side_by_side.append(
            curves,
            {
                **record,
                "step": 0,
                "test": score(model, test_x, test_y),
            },
        )
    losses, start = [], time.time()
    for step in range(done, args.steps):
        x, y = side_by_side.batch(images, labels, args.seed, step)
        logs = model.train_on_batch(x, y, return_dict=True)
        losses.append(float(logs["loss"]))
        if (step + 1) % args.log_every == 0:
            side_by_side.append(
                curves,
                {
                    **record,
                    "step": step + 1,
                    "mean_loss": float(np.mean(losses)),
                    "terms": {k: float(v) for k, v in logs.items()},
                    "seconds": round(time.time() - start, 1),
                },
            )
            losses = []
            print(f"step {step + 1} loss {float(logs['loss']):.3f}", flush=True)
        if (step + 1) % args.eval_every == 0:
            side_by_side.append(
                curves,
                {
                    **record,
                    "step": step + 1,
                    "test": score(model, test_x, test_y),
                },
            )
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            model.save(saved)
    print(f"saved {saved} at step {args.steps}", file=sys.stderr)


if __name__ == "__main__":
    main()
