"""The EMClassCaps layer: class capsules with EM routing."""

import keras
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_matrix_capsules_shape
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_positive_number
from keras_capsules.layers._em_routing import EMRoutingOptions
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops.em import _core as em_core
from keras_capsules.ops.patches import PLACEMENTS
from keras_capsules.ops.patches import add_coordinates

_DEFAULTS = em_core.DEFAULTS


@keras.saving.register_keras_serializable(package="keras_capsules")
class EMClassCaps(EMRoutingOptions, keras.layers.Layer):
    """Class capsules: a capsule grid routed by EM to one capsule per class.

    The Class Capsules layer of the paper (Hinton et al. 2018, Section 5).
    Every input capsule votes for every class with `V = M W`, one 4x4 `W` per
    (input type, class), shared by all positions (`B * 16 * num_classes`
    weights). Coordinate addition (Section 3.1, `ops.add_coordinates`) adds
    the (row, column) of each input position to two elements of its votes, so
    that the shared transforms keep where each part was. All `height * width *
    B` input capsules are routed jointly as `keras_capsules.ops.em_routing`
    routes them, with its defaults (docs/design/em_routing_defaults.md); each
    class has its own `beta_v` and `beta_a`. `**ops.OFFICIAL_EM_CLASS_OPTIONS`
    reproduces the routing of the official class layer to float precision.

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton et al., ICLR 2018).

    Args:
        num_classes: Positive integer, the number of class capsules.
        routing_iterations: Positive integer. Defaults to `2` (the paper: 3).
        coordinate_addition: Boolean, whether to add the position of each
            input capsule to its votes. Defaults to `True`.
        coordinate_placement: `"official"` (`pose[0, 0]` and `pose[0, 1]`, as
            the official code) or `"paper"` (`pose[0, 3]` and `pose[1, 3]`, as
            the paper describes). Defaults to `"official"`.
        coordinate_scale: Optional positive float, the distance between
            neighbouring cell centres (the official code uses pixel positions of
            receptive-field centres divided by 100). Defaults to `None`, the
            normalised centres `((i + 0.5) / height, (j + 0.5) / width)`.
        final_lambda: Positive float, the final inverse temperature. Defaults
            to `1e-3` (official: `0.0025`).
        min_variance: Positive float, the variance floor. Defaults to `5e-4`.
        routing_mode: `"paper"` or `"official"`, the M-step forms (see
            `em_routing`). Defaults to `"paper"`.
        epsilon: Optional positive float added to every mass. Defaults to
            `None`, which means `keras.config.epsilon()` (official: 1e-5).
        kernel_initializer: Initializer for the transforms `W`. Defaults to
            `None`, which means `TruncatedNormal(stddev=0.01)` (official).
        beta_v_initializer: Initializer for `beta_v`. Defaults to `None`,
            which means zeros (official: 2.0).
        beta_a_initializer: Initializer for `beta_a`. Defaults to `None`,
            which means zeros (official: 1.0).
        kernel_regularizer: Optional regularizer for `W`. Defaults to `None`.
        kernel_constraint: Optional constraint for `W`. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: A list `[poses, activations]` of matrix capsules.

    Input shape:
        A list of two tensors: poses `(batch, height, width, B, pose_size,
        pose_size)` and activations `(batch, height, width, B)`, with static
        `height`, `width`, `B` and pose shape.

    Output shape:
        A list `[poses, activations]` of shapes `(batch, num_classes,
        pose_size, pose_size)` and `(batch, num_classes)` (class probabilities).

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
        routing_iterations=_DEFAULTS.routing_iterations,
        coordinate_addition=True,
        coordinate_placement="official",
        coordinate_scale=None,
        final_lambda=_DEFAULTS.final_lambda,
        min_variance=_DEFAULTS.min_variance,
        routing_mode=_DEFAULTS.routing_mode,
        epsilon=_DEFAULTS.epsilon,
        kernel_initializer=None,
        beta_v_initializer=None,
        beta_a_initializer=None,
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
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
        _, height, width, num_in, pose_size, _ = poses.shape
        # V = M W, one W per (input type, class), shared by positions.
        votes = ops.einsum("bhwipq,icqr->bhwicpr", poses, self.kernel)
        if self.coordinate_addition:
            votes = add_coordinates(
                votes,
                coordinate_placement=self.coordinate_placement,
                coordinate_scale=self.coordinate_scale,
            )
        # Every capsule of the grid is a child of every class capsule.
        num_children = height * width * num_in
        poses, activations = em_core.route_dense(
            votes=ops.reshape(
                votes,
                (-1, num_children, self.num_classes, pose_size * pose_size),
            ),
            activations=ops.reshape(activations, (-1, num_children)),
            beta_v=self.beta_v,
            beta_a=self.beta_a,
            options=self.routing_options,
        )
        shape = (-1, self.num_classes, pose_size, pose_size)
        return [ops.reshape(poses, shape), activations]

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
