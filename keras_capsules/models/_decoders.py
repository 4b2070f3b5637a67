"""The reconstruction decoders of `CapsNet` and `EfficientCapsNet`: each
maps the masked class capsules, flattened, to an image in `[0, 1]`."""

import math

import keras

# The convolutional decoder grows an 8x8 map to 48x48: three bilinear 2x
# upsamplings, each followed by a valid 3x3 convolution, and a last one.
CONVOLUTIONAL_DECODER_SIZE = 48


def dense_decoder(
    num_inputs,
    units,
    image_shape,
    kernel_initializer="glorot_uniform",
    output_initializer="glorot_uniform",
):
    """The reconstruction decoder of Sabour et al.: ReLU dense layers of
    `units`, then one sigmoid unit per pixel, reshaped to `image_shape`."""
    return keras.Sequential(
        [keras.Input(shape=(num_inputs,))]
        + [
            keras.layers.Dense(
                size,
                activation="relu",
                kernel_initializer=kernel_initializer,
                name=f"decoder_dense_{i}",
            )
            for i, size in enumerate(units)
        ]
        + [
            keras.layers.Dense(
                math.prod(image_shape),
                activation="sigmoid",
                kernel_initializer=output_initializer,
                name="decoder_output",
            ),
            keras.layers.Reshape(image_shape, name="decoder_reshape"),
        ],
        name="decoder",
    )


def convolutional_decoder(num_inputs, image_shape):
    """The Efficient-CapsNet smallNORB decoder: a dense map of 8x8, three
    rounds of bilinear 2x upsampling and a valid 3x3 LeakyReLU(0.2)
    convolution, then a sigmoid 3x3 convolution to the image's channels,
    for 48x48 images."""
    base = CONVOLUTIONAL_DECODER_SIZE // 6
    layers = [
        keras.Input(shape=(num_inputs,)),
        keras.layers.Dense(base * base, name="decoder_dense"),
        keras.layers.Reshape((base, base, 1), name="decoder_reshape"),
    ]
    for i, filters in enumerate((64, 128, 128)):
        layers += [
            keras.layers.UpSampling2D(
                interpolation="bilinear", name=f"decoder_upsampling_{i}"
            ),
            keras.layers.Conv2D(
                filters,
                3,
                activation=keras.layers.LeakyReLU(negative_slope=0.2),
                name=f"decoder_conv_{i}",
            ),
        ]
    layers.append(
        keras.layers.Conv2D(
            image_shape[-1], 3, activation="sigmoid", name="decoder_output"
        )
    )
    return keras.Sequential(layers, name="decoder")
