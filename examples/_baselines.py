"""The CNN baselines that the capsule papers compare against.

Not a script and not part of the library: the experiment scripts import it
to train a convolutional network on the same data as the capsule network.
"""

import keras

import keras_capsules


def sabour_cnn(input_shape, num_classes=10, num_labels=1, pool=True):
    """The baseline CNN of Sabour et al. (2017), section 5.

    Three 5x5 convolutions of 256, 256 and 128 ReLU channels (stride 1,
    "same" padding), two fully connected ReLU layers of 328 and 192 units
    and, after dropout, the output layer: a softmax with cross-entropy for
    one label per image, or one sigmoid per class with binary
    cross-entropy for `num_labels > 1` (MultiMNIST). The paper does not say
    whether the convolutions pool; at 28x28 without pooling the network
    has the paper's 35.4M parameters. `pool=True` adds a 2x2 max-pooling
    after each of the first two convolutions, which keeps the network at
    about the cost of CapsNet per image on larger canvases.

    Returns:
        A compiled `keras.Model` whose metric is named `"accuracy"`:
        categorical accuracy, or with `num_labels > 1` all labels right.
    """
    layers = [keras.Input(shape=input_shape)]
    for i, filters in enumerate((256, 256, 128)):
        layers.append(
            keras.layers.Conv2D(filters, 5, padding="same", activation="relu")
        )
        if pool and i < 2:
            layers.append(keras.layers.MaxPooling2D(2))
    layers += [
        keras.layers.Flatten(),
        keras.layers.Dense(328, activation="relu"),
        keras.layers.Dense(192, activation="relu"),
        keras.layers.Dropout(0.5),
    ]
    if num_labels == 1:
        layers.append(keras.layers.Dense(num_classes, activation="softmax"))
        loss = "categorical_crossentropy"
        metric = keras.metrics.CategoricalAccuracy(name="accuracy")
    else:
        layers.append(keras.layers.Dense(num_classes, activation="sigmoid"))
        loss = "binary_crossentropy"
        metric = keras_capsules.metrics.TopKExactMatch(
            num_labels, name="accuracy"
        )
    model = keras.Sequential(layers, name="baseline_cnn")
    model.compile(
        optimizer=keras.optimizers.Adam(
            learning_rate=keras.optimizers.schedules.ExponentialDecay(
                1e-3, decay_steps=2000, decay_rate=0.96
            )
        ),
        loss=loss,
        metrics=[metric],
        jit_compile=keras.backend.backend() != "torch",
    )
    return model
