"""Votes and a gradient step shared by the tests of the routing ops."""

import keras
import numpy as np
from keras import ops


def random_votes(shape, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype("float32")


def degenerate_votes(kind, shape=(2, 6, 4, 3)):
    """All-zero, identical or 1e4-sized votes."""
    if kind == "zero":
        return np.zeros(shape, dtype="float32")
    if kind == "identical":
        return np.broadcast_to(random_votes(shape[-1:]), shape).copy()
    return random_votes(shape, scale=1e4)


class RoutedWeight(keras.layers.Layer):
    """Routes a trainable votes weight with `routing(w, **kwargs)`, to take
    a gradient step."""

    def __init__(self, routing, votes, routing_kwargs, **kwargs):
        super().__init__(**kwargs)
        self.routing = routing
        self.votes = np.asarray(votes, dtype="float32")
        self.routing_kwargs = routing_kwargs

    def build(self, input_shape):
        self.w = self.add_weight(
            name="votes",
            shape=self.votes.shape,
            initializer=keras.initializers.Constant(self.votes),
        )

    def call(self, inputs):
        outputs = self.routing(self.w, **self.routing_kwargs)
        return inputs * ops.reshape(outputs, (1, -1))


def fit_one_step(routing, *cases):
    """One SGD step through several routings in one model.

    Each case is `(votes, routing_kwargs)`; its votes become a trainable
    weight. One compiled step serves all cases (their gradients do not
    interact), which keeps the test fast. Returns the updated votes of each
    case and the model's output.
    """
    inputs = keras.Input(shape=(1,))
    layers = [RoutedWeight(routing, votes, kw) for votes, kw in cases]
    outputs = [layer(inputs) for layer in layers]
    if len(outputs) > 1:
        outputs = keras.layers.Concatenate()(outputs)
    else:
        outputs = outputs[0]
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = np.ones((2, 1), dtype="float32")
    y = np.full((2, outputs.shape[-1]), 0.5, dtype="float32")
    model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    updated = [ops.convert_to_numpy(layer.w) for layer in layers]
    return updated, model.predict(x, verbose=0)
