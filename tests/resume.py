"""The batches a run feeds its model, whole or stopped and resumed from
`keras.callbacks.BackupAndRestore`, shared by the tests of every seeded
data stream that must resume where it stopped."""

import keras


class Recorder(keras.layers.Layer):
    """Passes its input through, keeping a copy of every training batch."""

    def __init__(self, seen, **kwargs):
        super().__init__(**kwargs)
        # A bound method: Keras would track (and copy) a list attribute.
        self.record = seen.append

    def call(self, x, training=None):
        if training:
            self.record(keras.ops.convert_to_numpy(x))
        return x


class Interrupt(keras.callbacks.Callback):
    """Raises before batch 1 of epoch `epoch`, as a killed run would stop."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.current == self.epoch and batch == 1:
            raise KeyboardInterrupt("interrupted")


def batches_seen(
    data,
    epochs,
    backup_dir,
    interrupt_at=None,
    callbacks=(),
    activation="softmax",
    loss="categorical_crossentropy",
):
    """The training batches that `fit` on `data` (a `PyDataset` of images
    and 10-class labels) feeds a small model, backed up in `backup_dir`;
    with `interrupt_at`, the run stops at batch 1 of that epoch."""
    seen = []
    model = keras.Sequential(
        [
            keras.Input(data[0][0].shape[1:]),
            Recorder(seen),
            keras.layers.Flatten(),
            keras.layers.Dense(10, activation=activation),
        ]
    )
    model.compile("sgd", loss, run_eagerly=True)
    all_callbacks = [keras.callbacks.BackupAndRestore(backup_dir)]
    if interrupt_at is not None:
        all_callbacks.append(Interrupt(interrupt_at))
    try:
        model.fit(
            data,
            epochs=epochs,
            callbacks=all_callbacks + list(callbacks),
            shuffle=False,
            verbose=0,
        )
    except KeyboardInterrupt:
        pass
    return seen
