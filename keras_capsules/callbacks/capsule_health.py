"""The CapsuleHealth callback: matrix-capsule statistics logged during fit."""

import math

import keras
import numpy as np

from keras_capsules._validation import check_image_values
from keras_capsules._validation import check_positive_int
from keras_capsules.layers.em_class_caps import EMClassCaps
from keras_capsules.layers.em_conv_caps import EMConvCaps
from keras_capsules.layers.primary_matrix_caps import PrimaryMatrixCaps

_CAPSULE_LAYERS = (PrimaryMatrixCaps, EMConvCaps, EMClassCaps)


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsuleHealth(keras.callbacks.Callback):
    """Logs how healthy the matrix capsules of a model are during `fit`.

    An EM network can be fast and finite and still not learn: when the
    parent activations are the same for every image, or the poses shrink
    from layer to layer until the votes lie far below the routing's
    variance floor `sqrt(min_variance)`, the routing cannot tell votes
    apart and the gradients that reach the transforms vanish. This callback
    makes those states visible. Every `every_n_epochs` epochs it runs the
    model on a fixed probe batch `images` and adds to `fit`'s `logs` (so to
    the `History`, the progress bar with `verbose=2`, and TensorBoard when
    `keras.callbacks.TensorBoard` comes after it in the callbacks list),
    for every `PrimaryMatrixCaps`, `EMConvCaps` and `EMClassCaps` layer
    `name`:

    - `name/activation_mean`: the mean activation;
    - `name/activation_spread`: the standard deviation of each capsule's
      activation across the probe images, averaged over the capsules (near
      0: every image gets the same activations);
    - `name/pose_rms`: the root mean square of the output poses;
    - `name/pose_rms_to_floor` (routed layers): `pose_rms /
      sqrt(min_variance)`, the scale of the layer's poses against its
      variance floor (well below 1: the votes are swamped by the floor);
    - `name/weight_name/update_rms`: for each trainable weight of the
      layer, the root mean square of its change since the previous log
      (since the start of training for the first): 0 means a blind start.

    The model must be functional (`keras.Model(inputs, outputs)` or a
    model such as `MatrixCapsNet` built that way), so that the capsule
    layers' outputs can be read from a model sharing its weights.

    Args:
        images: NumPy array, the probe batch, for example 256 test images.
        every_n_epochs: Positive integer, how often to log. Defaults to
            `1`.
        batch_size: Positive integer, the batch size of the probe's
            `predict`. Defaults to `64`.

    Raises:
        ValueError: If `images` holds NaN or an infinity (every statistic
            would be NaN), if `every_n_epochs` or `batch_size` is not a
            positive integer, or (at the start of training) if the model is
            not functional or has no matrix-capsule layer.

    Example:

    ```python
    health = keras_capsules.callbacks.CapsuleHealth(x_test[:256])
    history = model.fit(x, y, epochs=3, callbacks=[health])
    history.history["conv_caps1/activation_spread"]
    ```
    """

    def __init__(self, images, every_n_epochs=1, batch_size=64):
        super().__init__()
        self.images = check_image_values(np.asarray(images), "images")
        self.every_n_epochs = check_positive_int(
            every_n_epochs, "every_n_epochs"
        )
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self._probe = None
        self._layers = []
        self._previous = {}

    def on_train_begin(self, logs=None):
        model = self.model
        self._layers = [
            layer
            for layer in model.layers
            if isinstance(layer, _CAPSULE_LAYERS)
        ]
        if not self._layers:
            raise ValueError(
                "CapsuleHealth found no PrimaryMatrixCaps, EMConvCaps or "
                "EMClassCaps layer in the model. "
                f"Received: model={model.name!r}"
            )
        try:
            outputs = [layer.output for layer in self._layers]
            self._probe = keras.Model(model.inputs, outputs)
        except (AttributeError, ValueError) as error:
            raise ValueError(
                "CapsuleHealth needs a functional model, whose layers' "
                "outputs it can read. "
                f"Received: model={model.name!r} ({error})"
            ) from None
        self._previous = self._weights()

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or (epoch + 1) % self.every_n_epochs:
            return
        logs.update(self.statistics())

    def statistics(self):
        """Returns the statistics described above, as a dict of floats."""
        outputs = self._probe.predict(
            self.images, batch_size=self.batch_size, verbose=0
        )
        stats = {}
        for layer, (poses, activations) in zip(self._layers, outputs):
            name = layer.name
            poses = np.asarray(poses, "float64")
            activations = np.asarray(activations, "float64")
            pose_rms = math.sqrt(float(np.mean(np.square(poses))))
            stats[f"{name}/activation_mean"] = float(np.mean(activations))
            stats[f"{name}/activation_spread"] = float(
                np.mean(np.std(activations, axis=0))
            )
            stats[f"{name}/pose_rms"] = pose_rms
            if hasattr(layer, "min_variance"):
                stats[f"{name}/pose_rms_to_floor"] = pose_rms / math.sqrt(
                    layer.min_variance
                )
        current = self._weights()
        for key, value in current.items():
            change = value - self._previous[key]
            stats[f"{key}/update_rms"] = math.sqrt(
                float(np.mean(np.square(change)))
            )
        self._previous = current
        return stats

    def get_config(self):
        return {
            "images": self.images.tolist(),
            "every_n_epochs": self.every_n_epochs,
            "batch_size": self.batch_size,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def _weights(self):
        return {
            f"{layer.name}/{weight.name}": np.array(
                keras.ops.convert_to_numpy(weight), "float64"
            )
            for layer in self._layers
            for weight in layer.trainable_weights
        }
