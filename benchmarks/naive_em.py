"""A deliberately naive EM convolutional capsule layer, for comparison only.

`NaiveEMConvCaps` computes what the popular research ports of "Matrix
capsules with EM routing" compute (the TensorFlow code of
IBM/matrix-capsules-with-em-routing before its sparse rewrite and the
PyTorch port yl-1993/Matrix-Capsules-EM-PyTorch), written the way they
write it, so that `benchmarks/run.py` can measure what
`keras_capsules.layers.EMConvCaps` saves:

- the `kernel_size` windows are gathered from the flattened capsule grid
  with `keras.ops.take` and a precomputed index array, then every window
  pose is repeated once per output type;
- the transformation matrices are tiled over the batch and the output
  positions into a materialised `(batch, out_h, out_w, K*K*B, C, 4, 4)`
  tensor, and the votes are one broadcast `keras.ops.matmul` of the two;
- EM routing runs separately in every window: each child's assignments
  are normalised over the output types of that window only
  (`keras_capsules.ops.em_routing`'s equations on per-position votes,
  written out here and differentiated step by step by automatic
  differentiation as in the research code, not through the package's
  hand-written gradients), so a child in `n` overlapping windows is
  routed `n` times independently.

The weights have the names, shapes and order of `EMConvCaps` (kernel
`(kh, kw, B, C, 4, 4)`, `beta_v` and `beta_a` of shape `(C,)`), so
`naive.set_weights(ours.get_weights())` gives both the same parameters.
Where windows do not overlap (`strides == kernel_size`) it computes the
function of `EMConvCaps(routing_normalization="window")`; elsewhere, and
against the default normalisation, they differ only in the E-step
normalisation (see `keras_capsules.ops.em_conv_routing`).

`naive_matrix_capsnet()` builds the `MatrixCapsNet` graph with its two
`EMConvCaps` replaced by `NaiveEMConvCaps`, under the same layer names, and
`copy_weights()` moves a `MatrixCapsNet`'s weights into it.

This module is benchmark code, not part of the package: it is not
registered for saving; `tests/benchmarks/naive_em_test.py` checks it
against `EMConvCaps`.

Usage:
    from benchmarks import naive_em
    small = keras_capsules.models.MatrixCapsNet.presets["small"]["config"]
    naive = naive_em.naive_matrix_capsnet(**small)
    naive_em.copy_weights(ours, naive)  # ours: a MatrixCapsNet
    naive_em.compile_like_matrix_capsnet(naive, jit_compile=True)
"""

import keras
import numpy as np
from keras import ops

import keras_capsules
from benchmarks import common
from keras_capsules.ops.em import _core as em_core

# The margin of the spread loss stays at its starting value.
_SPREAD_MARGIN = 0.2


def _window_indices(grid_size, kernel_size, strides):
    """Flat grid index of every window entry: `(out_h * out_w, kh * kw)`."""
    height, width = grid_size
    (kernel_h, kernel_w), (stride_h, stride_w) = kernel_size, strides
    out_h = (height - kernel_h) // stride_h + 1
    out_w = (width - kernel_w) // stride_w + 1
    rows = np.arange(out_h)[:, None] * stride_h + np.arange(kernel_h)
    cols = np.arange(out_w)[:, None] * stride_w + np.arange(kernel_w)
    flat = rows[:, None, :, None] * width + cols[None, :, None, :]
    return flat.reshape(out_h * out_w, kernel_h * kernel_w).astype("int32")


def _window_em_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    iterations,
    final_lambda,
    min_variance,
    epsilon,
    mode,
):
    """EM routing of every window on its own, written out step by step.

    `votes` `(batch, out_h, out_w, children, num_out, pose_size)`,
    `activations` `(batch, out_h, out_w, children)`. The equations of
    `keras_capsules.ops.em_routing` (both modes), in plain `keras.ops` and
    differentiated automatically, as the research ports do. Returns the
    parent means `(batch, out_h, out_w, num_out, pose_size)` and
    activations `(batch, out_h, out_w, num_out)`.
    """
    num_out, pose_size = votes.shape[-2:]
    log_2pi = float(np.log(2.0 * np.pi))
    activations = activations[..., None, None]
    assignments = ops.ones_like(votes[..., :1]) / num_out
    beta_v = ops.reshape(beta_v, (-1, 1))
    beta_a = ops.reshape(beta_a, (-1, 1))
    mean = None
    for iteration in range(iterations):
        if mode == "official":
            # The official schedule and mean momentum.
            decay = em_core.OFFICIAL_LAMBDA_DECAY
            lam = final_lambda * (1.0 - decay ** (iteration + 1))
        else:
            lam = final_lambda * (iteration + 1) / iterations
        r = assignments * activations
        mass = ops.sum(r, axis=-3, keepdims=True) + epsilon
        weights = r / mass
        new_mean = ops.sum(weights * votes, axis=-3, keepdims=True)
        if mode == "paper":
            mean = new_mean
        elif mean is None:
            mean = (1.0 - em_core.OFFICIAL_MEAN_MOMENTUM) * new_mean
        else:
            mean = (
                1.0 - em_core.OFFICIAL_MEAN_MOMENTUM
            ) * new_mean + em_core.OFFICIAL_MEAN_MOMENTUM * mean
        variance = min_variance + ops.sum(
            weights * ops.square(votes - mean), axis=-3, keepdims=True
        )
        sum_log_variance = ops.sum(ops.log(variance), axis=-1, keepdims=True)
        if mode == "official":
            logit = lam * (
                mass * (-sum_log_variance - beta_v * pose_size * (log_2pi + 1))
                - em_core.OFFICIAL_BETA_A_SCALE * beta_a
            )
        else:
            cost = mass * (pose_size * beta_v + 0.5 * sum_log_variance)
            logit = lam * (beta_a - cost)
        if iteration == iterations - 1:
            break
        log_p = (
            ops.log_sigmoid(logit)
            - 0.5 * (pose_size * log_2pi + sum_log_variance)
            - ops.sum(
                ops.square(votes - mean) / (2.0 * variance),
                axis=-1,
                keepdims=True,
            )
        )
        # Rank 5 for the softmax: TensorFlow's oneDNN CPU kernel takes no
        # more.
        assignments = ops.softmax(ops.squeeze(log_p, axis=-1), axis=-1)
        assignments = assignments[..., None]
    return ops.squeeze(mean, axis=-3), ops.sigmoid(
        ops.squeeze(logit, axis=(-3, -1))
    )


class NaiveEMConvCaps(keras_capsules.layers.EMConvCaps):
    """EM convolutional capsules as the research ports write them.

    See the module docstring. It takes the arguments, weights and output
    shapes of `keras_capsules.layers.EMConvCaps` (so `get_weights()` and
    `set_weights()` line up) and replaces only the computation. Only
    `"valid"` padding, as in those ports.

    Call arguments:
        inputs: A list `[poses, activations]`: poses `(batch, height,
            width, B, 4, 4)` and activations `(batch, height, width, B)`.

    Returns:
        A list `[poses, activations]` of shapes `(batch, out_h, out_w, C,
        4, 4)` and `(batch, out_h, out_w, C)`.
    """

    def __init__(self, num_capsules, **kwargs):
        super().__init__(num_capsules, **kwargs)
        if self.padding != "valid":
            raise ValueError(
                "NaiveEMConvCaps supports only padding='valid'. "
                f"Received: padding={self.padding!r}"
            )

    def build(self, input_shape):
        super().build(input_shape)
        height, width = input_shape[0][1:3]
        self._indices = _window_indices(
            (height, width), self.kernel_size, self.strides
        )

    def call(self, inputs):
        poses, activations = inputs
        _, height, width, num_in, pose_size, _ = poses.shape
        (_, out_h, out_w, *_), _ = self.compute_output_shape(
            [tuple(poses.shape), tuple(activations.shape)]
        )
        window = self.kernel_size[0] * self.kernel_size[1]
        num_children = window * num_in
        num_out = self.num_capsules
        batch = ops.shape(poses)[0]
        indices = ops.convert_to_tensor(self._indices)

        # Gather the windows from the flattened grid: (batch, positions,
        # K*K, B, 4, 4), then one row of children per output position.
        flat_poses = ops.reshape(
            poses, (-1, height * width, num_in, pose_size, pose_size)
        )
        tiles = ops.take(flat_poses, indices, axis=1)
        tiles = ops.reshape(
            tiles,
            (-1, out_h, out_w, num_children, 1, pose_size, pose_size),
        )
        # The research code repeats every child pose once per output type
        # and tiles the transforms over batch and positions before one
        # broadcast matmul; both copies are kept as they are.
        tiles = ops.tile(tiles, (1, 1, 1, 1, num_out, 1, 1))
        kernel = ops.reshape(
            self.kernel,
            (1, 1, 1, num_children, num_out, pose_size, pose_size),
        )
        kernel = ops.tile(kernel, (batch, out_h, out_w, 1, 1, 1, 1))
        votes = ops.matmul(tiles, kernel)
        votes = ops.reshape(
            votes,
            (-1, out_h, out_w, num_children, num_out, pose_size * pose_size),
        )

        flat_activations = ops.reshape(
            activations, (-1, height * width, num_in)
        )
        child_activations = ops.take(flat_activations, indices, axis=1)
        child_activations = ops.reshape(
            child_activations, (-1, out_h, out_w, num_children)
        )
        # Each window is routed on its own: assignments are normalised over
        # the output types of the window, not over every parent a child
        # feeds. Differentiated step by step, as the research code is, not
        # through the package's hand-written routing gradients.
        out_poses, out_activations = _window_em_routing(
            votes,
            child_activations,
            self.beta_v,
            self.beta_a,
            iterations=self.routing_iterations,
            final_lambda=self.final_lambda,
            min_variance=self.min_variance,
            epsilon=keras.config.epsilon(),
            mode=self.routing_mode,
        )
        out_poses = ops.reshape(
            out_poses, (-1, out_h, out_w, num_out, pose_size, pose_size)
        )
        return [out_poses, out_activations]


def naive_matrix_capsnet(name="naive_matrix_capsnet", **kwargs):
    """`MatrixCapsNet`'s graph with `NaiveEMConvCaps` for its `EMConvCaps`.

    `kwargs` are the arguments of `keras_capsules.models.MatrixCapsNet`
    (with its defaults), and the layers (`conv1`, `primary_caps`,
    `conv_caps1`, `conv_caps2`, `class_caps`) have the same names, weights
    and regularizers, so `copy_weights(matrix_capsnet, naive)` makes the
    two models share their parameters. Returns an uncompiled functional
    `keras.Model` mapping images to class activations.
    """

    # The layers are rebuilt from the configs of a MatrixCapsNet, so the
    # two graphs cannot drift apart (initializers, regularizers, names).
    ours = keras_capsules.models.MatrixCapsNet(**kwargs)

    def rebuild(layer, cls=None):
        return (cls or type(layer)).from_config(layer.get_config())

    images = keras.Input(shape=tuple(ours.inputs[0].shape[1:]), name="images")
    capsules = rebuild(ours.primary_caps)(rebuild(ours.conv1)(images))
    for layer in (ours.conv_caps1, ours.conv_caps2):
        capsules = rebuild(layer, NaiveEMConvCaps)(capsules)
    _, activations = rebuild(ours.class_caps)(capsules)
    return keras.Model(images, activations, name=name)


def copy_weights(source, target):
    """Copies the weights of every layer of `target` from the same-named
    layer of `source` (layers without weights are skipped)."""
    for layer in target.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights(source.get_layer(layer.name).get_weights())


def compile_like_matrix_capsnet(model, **kwargs):
    """Compiles `model` as `MatrixCapsNet.compile()` does, margin fixed.

    Adam with the official exponentially decayed learning rate, the spread
    loss with a margin of 0.2, and the accuracy of the argmax; `kwargs`
    (such as `jit_compile`) go to `keras.Model.compile`.
    """
    model.compile(
        optimizer=common.official_matrix_optimizer(),
        loss=keras_capsules.losses.SpreadLoss(margin=_SPREAD_MARGIN),
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
        **kwargs,
    )
