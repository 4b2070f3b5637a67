"""Checks shared by the fully connected capsule layers, `DenseCaps` and
`SelfAttentionCaps`."""


def check_capsule_list(input_shape, owner):
    """Returns `input_shape` as a tuple; raises unless it is
    `(batch, num_in, dim_in)` with `num_in` and `dim_in` defined."""
    input_shape = tuple(input_shape)
    if len(input_shape) != 3 or None in input_shape[1:]:
        raise ValueError(
            "Expected input of rank 3 (batch, num_in, dim_in) with "
            f"num_in and dim_in defined for {owner}. "
            f"Received: input_shape={input_shape}"
        )
    return input_shape


def check_built(layer):
    """Raises unless `layer` has its kernel, before it computes votes."""
    if not layer.built:
        raise ValueError(
            f"{type(layer).__name__} `{layer.name}` has no kernel yet: call "
            "the layer on inputs, or build it, before asking for votes. "
            f"Received: built={layer.built}"
        )
