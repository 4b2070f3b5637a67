"""`get_config` entries of the layers' initializers, regularizers and
constraints."""

import keras


def serialize_objects(layer, *names):
    """Serializes the initializer, regularizer and constraint attributes.

    Returns the `get_config` entries `{name: serialized layer.<name>}`.
    `keras.initializers.serialize`, `keras.regularizers.serialize` and
    `keras.constraints.serialize` all are `serialize_keras_object`.
    """
    return {
        name: keras.saving.serialize_keras_object(getattr(layer, name))
        for name in names
    }
