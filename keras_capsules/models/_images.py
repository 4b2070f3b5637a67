"""The input convention of the models: which images they take, and what a
non-finite image gives.

- Float images hold pixel values in `[0, 1]` (the range the presets were
  trained on) and pass unchanged.
- `uint8` images hold pixel values in `[0, 255]`, as image files decode,
  and are divided by 255, so that they give what the same images as
  `[0, 1]` floats give. The rule is keyed on the dtype, not on the values:
  a `uint8` image is always in `[0, 255]`, whereas a float image whose
  largest value is 1 may be a dim `[0, 255]` image or a bright `[0, 1]`
  one. Keras casts a functional model's inputs to the dtype of its `Input`
  inside `Functional.call`, so the rule acts before that, in the model's
  `call`. Other integer and boolean dtypes are refused.
- The image shape, channel axis included, is checked against
  `image_shape` on every call, whatever ran before: after one call,
  TensorFlow traces a new shape again with its sizes left unknown, which
  Keras's own input check lets through to XLA. (Keras's check also lets a
  missing channel axis of 1 through; accepting it here would make images of
  one rank fail after images of the other, since TensorFlow then traces
  with an unknown rank.)
- An image with a NaN or infinite pixel gives NaN scores (and capsules)
  in every entry point, eager or compiled: it never yields a finite class.
  Other images of the batch are unaffected.
"""

import keras
from keras import ops


def static_shape(x):
    """The static shape of `x` as a tuple, or `None` if its rank is
    unknown (a TensorFlow tensor traced with an unknown shape)."""
    try:
        return tuple(x.shape)
    except (TypeError, ValueError):
        return None


def standardize(x, image_shape, model_name):
    """`x` as float images of shape `(batch_size,) + image_shape`, `uint8`
    pixel values divided by 255.

    Raises:
        TypeError: If `x` has an integer dtype other than `uint8`, or is
            boolean.
        ValueError: If the static shape of `x` is not `(batch_size,) +
            image_shape`.
    """
    # A tensor, also for NumPy input: `Functional.call` warns that the
    # structure of anything else does not match its inputs.
    if not ops.is_tensor(x):
        x = ops.convert_to_tensor(x)
    expected = (None,) + tuple(image_shape)
    shape = static_shape(x)
    if (
        shape is None
        or len(shape) != len(expected)
        or any(size != want for size, want in zip(shape[1:], expected[1:]))
    ):
        if shape is None or (len(shape) == len(expected) and None in shape[1:]):
            # TensorFlow traces a function called with a new shape again,
            # with the sizes that differ left unknown.
            received = "unknown" if shape is None else shape
            hint = (
                " The shape is unknown in this trace: after images of "
                "another shape or rank, TensorFlow traced the step again "
                "without it; pass images of the shape above."
            )
        else:
            received, hint = shape, " Resize the images, or build the model "
            hint += "with another image_shape."
            if len(shape) == len(expected) - 1 and image_shape[-1] == 1:
                hint = " Add the channel axis: x[..., None]."
        raise ValueError(
            f"{model_name} takes images of shape (batch_size, "
            f"{', '.join(str(size) for size in image_shape)}), its "
            f"image_shape.{hint} Received: x.shape={received}"
        )
    dtype = keras.backend.standardize_dtype(x.dtype)
    if dtype == "uint8":
        return ops.cast(x, "float32") / 255.0
    if "int" in dtype or dtype == "bool":
        raise TypeError(
            f"{model_name} takes float images with pixel values in [0, 1] "
            "or uint8 images with values in [0, 255] (divided by 255). "
            "Cast 8-bit images to uint8, or rescale the images to floats "
            f"in [0, 1]. Received: x.dtype={dtype}"
        )
    return x


def mask_non_finite(images, outputs):
    """`outputs` (a tensor or a structure of tensors with the batch first)
    with every entry of an image that holds a NaN or an infinite pixel set
    to NaN."""
    rank = len(images.shape)
    finite = ops.all(ops.isfinite(images), axis=tuple(range(1, rank)))

    def mask(output):
        shape = (-1,) + (1,) * (len(output.shape) - 1)
        nan = ops.convert_to_tensor(float("nan"), dtype=output.dtype)
        return ops.where(ops.reshape(finite, shape), output, nan)

    return keras.tree.map_structure(mask, outputs)
