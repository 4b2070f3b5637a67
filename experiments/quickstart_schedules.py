"""CapsNet learning-rate schedules for runs of known length, short and long.

Trains `CapsNet` as `examples/capsnet_mnist.py` does without `--data-dir`
(the embedded 5,000-image sample, its last twelfth held out to validate,
`mnist.ShiftedDigits` at batch 128, Adam) under one schedule of the
learning rate, and appends one JSON line per run: the validation accuracy
after every epoch and the accuracy on the sample's 1,000 test images at
the end. A schedule is chosen on the validation accuracy; the test
accuracy in the same line is a record, not a criterion.

Schedules (T = the run's steps):

- `cosine`: a linear warm-up from zero to `--peak` over `--warmup` times
  T steps (none by default), or the peak held for `--hold` times T steps,
  then a cosine to `--floor` times the peak over the rest (`--floor 1`:
  constant);
- `paper`: 1e-3 decayed by 0.96 every 2,000 steps (no length);
- `default` (the default): `CapsNet.compile(total_steps=T)` as the
  installed package has it.

Usage:
    KERAS_BACKEND=tensorflow python experiments/quickstart_schedules.py \\
        --schedule cosine --peak 2e-3 --floor 0.1 --epochs 2 --seed 0 \\
        --jsonl runs/schedules.jsonl
    python experiments/quickstart_schedules.py --schedule default --smoke
"""

import argparse
import json
import time

import keras
from _common import append_jsonl
from _common import warmup_cosine

import keras_capsules
from keras_capsules.datasets import mnist

SCHEDULES = ("cosine", "paper", "default")


def learning_rate(name, total_steps, peak, floor, warmup, hold):
    if name == "paper":
        return keras.optimizers.schedules.ExponentialDecay(1e-3, 2000, 0.96)
    return warmup_cosine(
        peak,
        total_steps,
        round((hold or warmup) * total_steps),
        floor,
        start=peak if hold else 0.0,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=SCHEDULES, default="default")
    parser.add_argument("--peak", type=float, default=1e-3)
    parser.add_argument("--floor", type=float, default=0.0)
    parser.add_argument("--warmup", type=float, default=0.0)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--jsonl", default="schedules.jsonl")
    parser.add_argument("--smoke", action="store_true", help="A tiny run.")
    args = parser.parse_args()
    keras.utils.set_random_seed(args.seed)

    x_train, y_train = mnist.load_sample("train")
    x_test, y_test = mnist.load_sample("test")
    num_validation = len(x_train) // 12
    x_val, y_val = x_train[-num_validation:], y_train[-num_validation:]
    x_train, y_train = x_train[:-num_validation], y_train[:-num_validation]
    if args.smoke:
        args.epochs, args.batch_size = 1, 16
        x_train, y_train = x_train[:34], y_train[:34]
        x_val, y_val = x_val[:16], y_val[:16]
        x_test, y_test = x_test[:16], y_test[:16]
    train = mnist.ShiftedDigits(
        x_train, y_train, args.batch_size, seed=args.seed
    )
    total_steps = args.epochs * len(train)

    model = keras_capsules.models.CapsNet(
        image_shape=(28, 28, 1), num_classes=10
    )
    if args.schedule == "default":
        model.compile(total_steps=total_steps)
    else:
        rate = learning_rate(
            args.schedule,
            total_steps,
            args.peak,
            args.floor,
            args.warmup,
            args.hold,
        )
        model.compile(optimizer=keras.optimizers.Adam(rate))
    start = time.time()
    history = model.fit(
        train, epochs=args.epochs, validation_data=(x_val, y_val), verbose=2
    ).history
    test = model.evaluate(x_test, y_test, return_dict=True, verbose=0)
    record = {
        "schedule": args.schedule,
        **{
            key: getattr(args, key) if args.schedule == "cosine" else None
            for key in ("peak", "floor", "warmup", "hold")
        },
        "epochs": args.epochs,
        "steps": total_steps,
        "seed": args.seed,
        "backend": keras.backend.backend(),
        "val_accuracy": [round(v, 4) for v in history["val_accuracy"]],
        "test_accuracy": round(float(test["accuracy"]), 4),
        "minutes": round((time.time() - start) / 60, 2),
    }
    append_jsonl(args.jsonl, record)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
