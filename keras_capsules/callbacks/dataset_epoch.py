"""A callback that tells a seeded dataset the epoch `fit` is in."""

import keras


# Not registered for serialization: it holds a dataset, which has no config.
class DatasetEpoch(keras.callbacks.Callback):
    """Sets a dataset's `epoch` to the epoch `fit` is in.

    A seeded dataset such as `keras_capsules.datasets.mnist.ShiftedDigits`
    draws the order and the augmentation of an epoch from its seed and its
    `epoch` attribute, which it advances itself at the end of every epoch.
    A run that `keras.callbacks.BackupAndRestore` resumes starts `fit` at a
    later epoch, while a new dataset starts at epoch 0. With this callback
    the dataset learns the epoch before its first batch is read, so the
    resumed run trains on the batches of an uninterrupted one. Pass
    `shuffle=False` to `fit` as well: Keras would otherwise shuffle the
    batches of a `PyDataset` with Python's global random state, which a
    resumed run does not restore.

    Args:
        dataset: The dataset `fit` trains on: an object with a writable
            `epoch` attribute.

    Raises:
        TypeError: If `dataset` has no `epoch` attribute.

    Example:

    >>> import keras
    >>> import keras_capsules
    >>> from keras_capsules.datasets import mnist
    >>> x, y = mnist.load_sample("test")
    >>> train = mnist.ShiftedDigits(x[:64], y[:64], batch_size=32)
    >>> model = keras.Sequential(
    ...     [keras.Input((28, 28, 1)), keras.layers.Flatten(),
    ...      keras.layers.Dense(10, activation="softmax")]
    ... )
    >>> model.compile(loss="categorical_crossentropy")
    >>> history = model.fit(
    ...     train,
    ...     epochs=2,
    ...     shuffle=False,
    ...     callbacks=[keras_capsules.callbacks.DatasetEpoch(train)],
    ...     verbose=0,
    ... )
    >>> train.epoch
    2
    """

    def __init__(self, dataset):
        super().__init__()
        if not hasattr(dataset, "epoch"):
            raise TypeError(
                "Argument dataset must have an `epoch` attribute that the "
                "callback sets, as keras_capsules.datasets.mnist."
                "ShiftedDigits has. "
                f"Received: dataset={type(dataset).__name__}"
            )
        self.dataset = dataset

    def on_epoch_begin(self, epoch, logs=None):
        self.dataset.epoch = epoch
