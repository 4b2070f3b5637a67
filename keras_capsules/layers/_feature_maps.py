"""What the primary capsule layers, `PrimaryCaps` and
`DepthwisePrimaryCaps`, share: their input check and the reading of a
convolution's output as squashed capsules."""

from keras import ops

from keras_capsules.ops.squash import squash


def check_feature_map(input_shape, owner):
    """Returns `input_shape` as a tuple; raises unless it is
    `(batch, height, width, channels)` with `channels` defined."""
    input_shape = tuple(input_shape)
    if len(input_shape) != 4:
        raise ValueError(
            "Expected input of rank 4 (batch, height, width, channels) "
            f"for {owner}. Received: input_shape={input_shape}"
        )
    if input_shape[-1] is None:
        raise ValueError(
            f"The channels dimension of the input to {owner} must be "
            f"defined. Received: input_shape={input_shape}"
        )
    return input_shape


def to_capsules(features, capsule_dim, squash_form="rational"):
    """Splits the channels of every position of `features` into vectors of
    `capsule_dim` components, flattens positions and vectors into one list
    (row, column, then channel group) and squashes each vector."""
    height, width, channels = features.shape[1:]
    if height is None or width is None:
        shape = (ops.shape(features)[0], -1, capsule_dim)
    else:
        shape = (-1, height * width * channels // capsule_dim, capsule_dim)
    return squash(ops.reshape(features, shape), squash_form=squash_form)
