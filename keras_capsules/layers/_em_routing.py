"""What the two EM-routed layers share: their routing options, checked
once in `__init__` and read-only afterwards, and the translation of the
ops' option sets into layer arguments."""

from keras_capsules.ops.em import OFFICIAL_EM_CLASS_OPTIONS
from keras_capsules.ops.em import OFFICIAL_EM_OPTIONS
from keras_capsules.ops.em import _core as em_core

# The routing settings of a model's EM layers: the layers' defaults, or the
# official code's.
ROUTINGS = ("default", "official")

# Argument names of the ops -> of the layers.
_LAYER_ARGUMENTS = dict(
    zip(em_core.OP_NAMES, em_core.LAYER_NAMES),
    normalization="routing_normalization",
)


def layer_arguments(options):
    """Keyword arguments of the ops (`ops.OFFICIAL_EM_OPTIONS`, say) as
    keyword arguments of `EMConvCaps` or `EMClassCaps`."""
    return {_LAYER_ARGUMENTS.get(k, k): v for k, v in options.items()}


def model_routing(routing, routing_iterations):
    """Layer arguments `(conv, class)` of a model's `routing` setting (one
    of `ROUTINGS`); `routing_iterations`, unless `None`, overrides the
    setting's iterations in both."""
    if routing == "official":
        conv = layer_arguments(OFFICIAL_EM_OPTIONS)
        dense = layer_arguments(OFFICIAL_EM_CLASS_OPTIONS)
    else:
        conv, dense = {}, {}
    if routing_iterations is not None:
        conv["routing_iterations"] = routing_iterations
        dense["routing_iterations"] = routing_iterations
    return conv, dense


class EMRoutingOptions:
    """Mixin of `EMConvCaps` and `EMClassCaps`: `keep_routing_options`
    checks the options once; `call` hands `routing_options` to the routing
    as they are, and the read-only properties show them. A variant with
    other options is a new layer (`from_config` with overrides)."""

    def keep_routing_options(
        self,
        routing_iterations,
        final_lambda,
        min_variance,
        routing_mode,
        epsilon,
    ):
        self.routing_options = em_core.check_options(
            routing_iterations,
            final_lambda,
            min_variance,
            epsilon,
            routing_mode,
            names=em_core.LAYER_NAMES,
        )

    @property
    def routing_iterations(self):
        """The number of EM iterations (read-only)."""
        return self.routing_options.iterations

    @property
    def final_lambda(self):
        """The final inverse temperature of the routing (read-only)."""
        return self.routing_options.final_lambda

    @property
    def min_variance(self):
        """The floor added to every variance (read-only)."""
        return self.routing_options.min_variance

    @property
    def routing_mode(self):
        """`"official"` or `"paper"`, the forms of the M-step
        (read-only)."""
        return self.routing_options.mode

    @property
    def epsilon(self):
        """The epsilon added to every mass, or `None` for
        `keras.config.epsilon()` at call time (read-only)."""
        return self.routing_options.epsilon
