"""The presence noise of the Stacked Capsule Autoencoder layers."""

import keras

from keras_capsules._validation import check_int
from keras_capsules._validation import check_non_negative_number
from keras_capsules.ops._backend import draws_uniform_in_float64


def check_noise_arguments(noise_scale, inference_noise_seed):
    """Returns the checked `(noise_scale, inference_noise_seed)`."""
    return (
        check_non_negative_number(noise_scale, "noise_scale"),
        check_int(
            inference_noise_seed, "inference_noise_seed", allow_none=True
        ),
    )


def presence_noise(layer, shape, dtype, training):
    """Uniform noise in `[-noise_scale / 2, noise_scale / 2]` for the
    presence logits of `layer`, or `None` for none.

    In training it is drawn from the layer's `seed_generator`, so that
    every step draws anew. Outside training there is none, unless the
    layer has an `inference_noise_seed`: then it is drawn from that integer
    alone, the same noise at every call.
    """
    if layer.noise_scale == 0:
        return None
    if training:
        seed = layer.seed_generator
    elif layer.inference_noise_seed is not None:
        seed = layer.inference_noise_seed
    else:
        return None
    draw_dtype = "float64" if draws_uniform_in_float64() else dtype
    noise = keras.random.uniform(
        shape, minval=-0.5, maxval=0.5, dtype=draw_dtype, seed=seed
    )
    return keras.ops.cast(noise, dtype) * layer.noise_scale


# The entry of a weights file that holds a noisy layer's generator state.
SEED_STATE_KEY = "noise_seed_generator_state"


def save_seed_state(layer, store):
    """Adds the state of `layer.seed_generator` to a weights `store`, so
    that a restored run (`keras.callbacks.BackupAndRestore`) draws the
    noise of an uninterrupted one. Keras saves a layer's variables, not
    its seed generators'."""
    store[SEED_STATE_KEY] = layer.seed_generator.state


def without_seed_state(layer, store):
    """Restores the generator state from a weights `store` (files written
    before it was saved hold none), and returns the store's other
    entries, the layer's variables."""
    keys = list(store.keys())
    if SEED_STATE_KEY not in keys:
        return store
    layer.seed_generator.state.assign(store[SEED_STATE_KEY])
    return {key: store[key] for key in keys if key != SEED_STATE_KEY}
