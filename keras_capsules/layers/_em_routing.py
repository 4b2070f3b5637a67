"""What the two EM-routed layers share: their routing options, checked
once in `__init__` and read-only afterwards."""

from keras_capsules.ops.em import _core as em_core


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
        )

    @property
    def routing_iterations(self):
        """The number of EM iterations (read-only)."""
        return self.routing_options.routing_iterations

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
        return self.routing_options.routing_mode

    @property
    def epsilon(self):
        """The epsilon added to every mass, or `None` for
        `keras.config.epsilon()` at call time (read-only)."""
        return self.routing_options.epsilon
