"""The EMClassCaps layer: class capsules with EM routing."""

import warnings

import keras

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_matrix_capsules_shape
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_positive_number
from keras_capsules.layers._em_routing import EMRoutingOptions
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops.em import _capsules as em_capsules
from keras_capsules.ops.em import _core as em_core
from keras_capsules.ops.patches import PLACEMENTS

_DEFAULTS = em_core.DEFAULTS


@keras.saving.register_keras_serializable(package="keras_capsules")
class EMClassCaps(EMRoutingOptions, keras.layers.Layer):
    """Class capsules: a capsule grid routed by EM to one capsule per class.

    The Class Capsules layer of the paper (Hinton et al. 2018, Section 5).
    Every input capsule votes for every class with `V = M W`, where the
    4x4 transformation `W` depends only on the input capsule *type* and
    the class and is shared by all positions (`B * 16 * num_classes`
    weights for 4x4 poses). With coordinate addition (Section 3.1) the
    (row, column) coordinate of each input position is added to two
    elements of its votes (`keras_capsules.ops.add_coordinates`), so that
    the shared transforms keep where each part was. All `height * width
    * B` input capsules are then routed jointly by
    `keras_capsules.ops.em_routing`. Each class has its own `beta_v` and
    `beta_a` (`2 * num_classes` weights).

    The routing defaults are those of `keras_capsules.ops.em_routing`, the
    setting that learned fastest (docs/em_routing.md). The official class
    layer divides the official inverse temperature by 4 and adds 1e-5 to
    its masses: `routing_iterations=3, final_lambda=0.0025,
    min_variance=5e-4, epsilon=1e-5, routing_mode="official"`
    (`ops.OFFICIAL_EM_CLASS_OPTIONS`) reproduces its routing to float
    precision. The official code adds the coordinates to `pose[0, 0]`
    and `pose[0, 1]` (the default `coordinate_placement="official"`); the
    paper describes the first two elements of the right-hand column,
    `pose[0, 3]` and `pose[1, 3]` (`"paper"`). The official coordinates are
    pixel positions of receptive-field centres divided by 100, which needs
    the geometry of the whole network; by default this layer uses the
    normalised cell centres `((i + 0.5) / height, (j + 0.5) / width)` of its
    own input grid, or `((i + 0.5) * coordinate_scale, (j + 0.5) *
    coordinate_scale)` when `coordinate_scale` is given.

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton, Sabour & Frosst,
    ICLR 2018).

    Args:
        num_classes: Positive integer, the number of class capsules.
        routing_iterations: Positive integer, the number of EM iterations.
            Defaults to `2` (as `EMConvCaps`; the paper uses 3).
        coordinate_addition: Boolean, whether to add the position of each
            input capsule to its votes. Defaults to `True`.
        coordinate_placement: `"official"` or `"paper"`, which two pose
            elements receive the coordinates. Defaults to `"official"`.
        coordinate_scale: Optional positive float, the distance between
            neighbouring cell centres. Defaults to `None` (normalised
            centres).
        final_lambda: Positive float, the final inverse temperature.
            Defaults to `1e-3` (as `EMConvCaps`; the official class layer
            uses `0.0025`). Configs saved with the former `lambda_scale`
            argument still load: their `final_lambda * lambda_scale`
            becomes `final_lambda`, with a `FutureWarning`.
        min_variance: Positive float, the floor added to every variance.
            Defaults to `5e-4`.
        routing_mode: `"official"` or `"paper"`, the forms of the M-step
            (see `keras_capsules.ops.em_routing`). Defaults to `"paper"`
            (as `EMConvCaps`).
        epsilon: Optional positive float added to every mass of the
            routing. Defaults to `None`, which means
            `keras.config.epsilon()`, 1e-7 (the official class layer uses
            1e-5, which counts only where the activations are near 0).
        kernel_initializer: Initializer for the transformation matrices.
            Defaults to `None`, which means `TruncatedNormal(stddev=0.01)`
            (the official value).
        beta_v_initializer: Initializer for `beta_v`. Defaults to `None`,
            which means zeros (the official value is 2.0).
        beta_a_initializer: Initializer for `beta_a`. Defaults to `None`,
            which means zeros (the official value is 1.0).
        kernel_regularizer: Optional regularizer for the transformation
            matrices. Defaults to `None`.
        kernel_constraint: Optional constraint for the transformation
            matrices. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: A list `[poses, activations]` of matrix capsules.

    Input shape:
        A list of two tensors: poses `(batch, height, width, B,
        pose_size, pose_size)` and activations `(batch, height, width, B)`,
        with static `height`, `width`, `B` and pose shape.

    Output shape:
        A list `[poses, activations]`: poses of shape `(batch,
        num_classes, pose_size, pose_size)` and activations of shape
        `(batch, num_classes)`, the class probabilities.

    Raises:
        ValueError: If an argument is out of range, or if the input is not
            a list of poses and activations of matching shapes with square
            poses large enough for the coordinate placement.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> poses = np.random.rand(2, 4, 4, 8, 4, 4).astype("float32")
    >>> activations = np.random.rand(2, 4, 4, 8).astype("float32")
    >>> layer = keras_capsules.layers.EMClassCaps(num_classes=5)
    >>> class_poses, class_probabilities = layer([poses, activations])
    >>> tuple(class_poses.shape), tuple(class_probabilities.shape)
    ((2, 5, 4, 4), (2, 5))

    Reference:
    - [Official TensorFlow code](https://github.com/google-research/
      google-research/tree/master/capsule_em)
    """

    def __init__(
        self,
        num_classes,
        routing_iterations=_DEFAULTS.iterations,
        coordinate_addition=True,
        coordinate_placement="official",
        coordinate_scale=None,
        final_lambda=_DEFAULTS.final_lambda,
        min_variance=_DEFAULTS.min_variance,
        routing_mode=_DEFAULTS.mode,
        epsilon=_DEFAULTS.epsilon,
        kernel_initializer=None,
        beta_v_initializer=None,
        beta_a_initializer=None,
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        final_lambda = _fold_lambda_scale(final_lambda, kwargs)
        super().__init__(**kwargs)
        self.num_classes = check_positive_int(num_classes, "num_classes")
        check_bool(coordinate_addition, "coordinate_addition")
        self.coordinate_addition = coordinate_addition
        self.coordinate_placement = check_option(
            coordinate_placement, "coordinate_placement", PLACEMENTS
        )
        self.coordinate_scale = check_positive_number(
            coordinate_scale, "coordinate_scale", allow_none=True
        )
        self.keep_routing_options(
            routing_iterations,
            final_lambda,
            min_variance,
            routing_mode,
            epsilon,
        )
        # Fresh instances per layer: an unseeded initializer draws its seed
        # once, so a shared default object would repeat its values.
        if kernel_initializer is None:
            kernel_initializer = keras.initializers.TruncatedNormal(stddev=0.01)
        if beta_v_initializer is None:
            beta_v_initializer = keras.initializers.Zeros()
        if beta_a_initializer is None:
            beta_a_initializer = keras.initializers.Zeros()
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.beta_v_initializer = keras.initializers.get(beta_v_initializer)
        self.beta_a_initializer = keras.initializers.get(beta_a_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        pose_shape, _ = input_shape
        num_in, pose_size = pose_shape[3], pose_shape[4]
        self.kernel = self.add_weight(
            name="kernel",
            shape=(num_in, self.num_classes, pose_size, pose_size),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.beta_v = self.add_weight(
            name="beta_v",
            shape=(self.num_classes,),
            initializer=self.beta_v_initializer,
        )
        self.beta_a = self.add_weight(
            name="beta_a",
            shape=(self.num_classes,),
            initializer=self.beta_a_initializer,
        )
        self.input_spec = [
            keras.InputSpec(ndim=6, axes={3: num_in}),
            keras.InputSpec(ndim=4, axes={3: num_in}),
        ]

    def call(self, inputs):
        poses, activations = inputs
        return list(
            em_capsules.class_capsules(
                poses,
                activations,
                self.kernel,
                self.beta_v,
                self.beta_a,
                self.coordinate_addition,
                self.coordinate_placement,
                self.coordinate_scale,
                self.routing_options,
            )
        )

    def compute_output_shape(self, input_shape):
        pose_shape, _ = check_matrix_capsules_shape(input_shape, "EMClassCaps")
        batch, pose_size = pose_shape[0], pose_shape[4]
        if self.coordinate_addition and pose_size < 2:
            raise ValueError(
                "Coordinate addition needs poses of at least 2x2. Use "
                "coordinate_addition=False for 1x1 poses. "
                f"Received: input_shape={input_shape}"
            )
        return [
            (batch, self.num_classes, pose_size, pose_size),
            (batch, self.num_classes),
        ]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "routing_iterations": self.routing_iterations,
                "coordinate_addition": self.coordinate_addition,
                "coordinate_placement": self.coordinate_placement,
                "coordinate_scale": self.coordinate_scale,
                "final_lambda": self.final_lambda,
                "min_variance": self.min_variance,
                "routing_mode": self.routing_mode,
                "epsilon": self.epsilon,
                **serialize_objects(
                    self,
                    "kernel_initializer",
                    "beta_v_initializer",
                    "beta_a_initializer",
                    "kernel_regularizer",
                    "kernel_constraint",
                ),
            }
        )
        return config


def _fold_lambda_scale(final_lambda, kwargs):
    """`final_lambda` times a `lambda_scale` popped from `kwargs`, which
    configs saved before it was folded into `final_lambda` still hold."""
    if "lambda_scale" not in kwargs:
        return final_lambda
    lambda_scale = check_positive_number(
        kwargs.pop("lambda_scale"), "lambda_scale"
    )
    warnings.warn(
        "EMClassCaps(lambda_scale=) is deprecated and will be removed: "
        "pass final_lambda * lambda_scale as final_lambda. Received: "
        f"final_lambda={final_lambda}, lambda_scale={lambda_scale}",
        FutureWarning,
        stacklevel=3,
    )
    return check_positive_number(final_lambda, "final_lambda") * lambda_scale
