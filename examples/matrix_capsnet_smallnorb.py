"""Matrix capsules with EM routing on smallNORB, the paper's benchmark.

Trains `keras_capsules.models.MatrixCapsNet` (Hinton, Sabour & Frosst,
"Matrix capsules with EM routing", ICLR 2018,
https://openreview.net/forum?id=HJWLfGWRb) on smallNORB: photographs of 50
toys of 5 classes, each view a stereo pair. `keras_capsules.datasets.
smallnorb.load` stacks the pair as two channels, downsamples it to 48x48
and feeds random 32x32 crops with photometric distortions for training
and the central crop for testing, as the released code does.
`compile(total_steps=...)` supplies the spread loss and Adam with a cosine
decay over the run; the
`SpreadMarginScheduler` callback ramps the loss's margin from 0.2 to 0.9
over the first half of the run, as in the paper. It prints the test
accuracy, saves `matrix_capsnet_smallnorb.keras`, loads it back and checks
that the loaded model predicts the same.

`--data-dir` is a folder with the six original smallNORB `.mat.gz` files;
without it, TensorFlow Datasets downloads smallNORB (about 260 MB) into
`~/tensorflow_datasets` on the first run. The `tf.data` pipeline needs
TensorFlow. The paper trains the full network for tens of epochs, a GPU
run; no smallNORB accuracy of this package has been measured yet.
`--smoke` takes a few steps of a tiny network on random images, in under a
minute on a 2-core CPU, to check that everything runs.

Usage:
    python examples/matrix_capsnet_smallnorb.py --data-dir path/to/smallnorb
    python examples/matrix_capsnet_smallnorb.py  # downloads smallNORB
    python examples/matrix_capsnet_smallnorb.py --smoke

Set the backend with `KERAS_BACKEND=jax|tensorflow|torch`.
"""

import argparse
import os

import keras
import numpy as np

import keras_capsules

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument(
    "--data-dir", help="Folder with the smallNORB files; default: download."
)
parser.add_argument("--epochs", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument(
    "--output-dir", default=os.path.join("runs", "matrix_capsnet_smallnorb")
)
parser.add_argument("--smoke", action="store_true", help="Two tiny steps.")
args = parser.parse_args()
print(f"Keras {keras.__version__}, backend: {keras.backend.backend()}")
keras.utils.set_random_seed(0)

"""
## The data

Batched `tf.data` pipelines of `(images, one-hot labels)`, which `fit`
takes on every backend; for a smoke run, random standardised crops.
"""

if args.smoke:
    args.epochs, args.batch_size = 1, 16
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 32, 32, 2)).astype("float32")
    y = keras.utils.to_categorical(rng.integers(0, 5, 32), 5)
    train, test = (x, y), (x[:16], y[:16])
else:
    smallnorb = keras_capsules.datasets.smallnorb
    train = smallnorb.load(
        "train", batch_size=args.batch_size, manual_dir=args.data_dir, seed=0
    )
    test = smallnorb.load(
        "test", batch_size=args.batch_size, manual_dir=args.data_dir
    )

"""
## The model

The paper's full network (A=B=C=D=32 capsule types), on 32x32 stereo
crops; the "tiny" preset keeps every routed layer for smoke runs.
"""

model = keras_capsules.models.MatrixCapsNet.from_preset(
    "tiny" if args.smoke else "full", image_shape=(32, 32, 2), num_classes=5
)
# The learning rate decays to zero over the run: compile() is told its length.
steps = -(-len(train[0]) // args.batch_size) if args.smoke else len(train)
model.compile(total_steps=args.epochs * steps)
model.summary()

"""
## Training, with the paper's margin ramp
"""

margin = keras_capsules.callbacks.SpreadMarginScheduler(
    final_margin=0.9, ramp_epochs=max(1, args.epochs // 2)
)
if args.smoke:
    model.fit(*train, batch_size=args.batch_size, callbacks=[margin])
    metrics = model.evaluate(*test, return_dict=True, verbose=0)
else:
    model.fit(train, epochs=args.epochs, callbacks=[margin], verbose=1)
    metrics = model.evaluate(test, return_dict=True, verbose=0)
print(f"Test accuracy: {metrics['accuracy']:.4f}")

"""
## Saving and loading
"""

os.makedirs(args.output_dir, exist_ok=True)
path = os.path.join(args.output_dir, "matrix_capsnet_smallnorb.keras")
model.save(path)
loaded = keras.models.load_model(path)
images = train[0][:8] if args.smoke else np.asarray(next(iter(test))[0][:8])
np.testing.assert_allclose(
    loaded.predict(images, verbose=0),
    model.predict(images, verbose=0),
    atol=1e-5,
)
print(f"Saved {path}; the loaded model predicts the same.")
margin = keras.ops.convert_to_numpy(loaded.spread_margin)
print(f"Spread margin of the loaded model: {float(margin):.3f}")
