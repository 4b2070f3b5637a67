"""The training run of the learning tests: 50 steps of 32 images on
24x24 centre crops of the MNIST sample that ships with the package, then
the accuracy on 500 test images."""

import numpy as np

from keras_capsules.datasets import mnist

_CROP = slice(2, 26)
_STEPS = 50
_BATCH = 32
_TEST_IMAGES = 500


def _sample():
    x_train, y_train = mnist.load_sample("train")
    x_test, y_test = mnist.load_sample("test")
    # A fixed permutation, so the first steps see every class.
    order = np.random.default_rng(0).permutation(len(x_train))
    x_train, y_train = x_train[order], y_train[order]
    test_order = np.random.default_rng(1).permutation(len(x_test))
    x_test, y_test = x_test[test_order], y_test[test_order]
    size = _STEPS * _BATCH
    return (
        (x_train[:size, _CROP, _CROP], y_train[:size]),
        (x_test[:_TEST_IMAGES, _CROP, _CROP], y_test[:_TEST_IMAGES]),
    )


def accuracy_after_training(test, model):
    (x_train, y_train), (x_test, y_test) = _sample()
    model.fit(
        x_train, y_train, batch_size=_BATCH, epochs=1, shuffle=False, verbose=0
    )
    predictions = model.predict(x_test, batch_size=100, verbose=0)
    test.assertAllFinite(predictions)
    return float(np.mean(np.argmax(predictions, -1) == np.argmax(y_test, -1)))
