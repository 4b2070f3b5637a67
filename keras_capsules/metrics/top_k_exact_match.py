"""Exact match of the top-k classes: "both labels right" on MultiMNIST."""

import keras
from keras import ops

from keras_capsules._validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
def top_k_exact_match(y_true, y_pred, k=2):
    """Whether the `k` highest scores of each sample are exactly its labels.

    On MultiMNIST, with `k=2`, a sample counts as right only when both of
    its digits are recognised: "we consider a classification correct if
    both labels are right" (Sabour et al., 2017, section 6). Ties among the
    scores are broken as `keras.ops.top_k` breaks them.

    Args:
        y_true: Multi-hot labels of shape `(batch_size, num_classes)` with
            `k` ones per sample (values above 0.5 count as labels).
        y_pred: Scores of shape `(batch_size, num_classes)`, such as the
            capsule lengths of `CapsNet`.
        k: Positive int, the number of labels per sample. Defaults to `2`.

    Returns:
        A float32 tensor of shape `(batch_size,)`: 1 where the top-`k`
        classes equal the labelled classes, 0 elsewhere.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from keras_capsules.metrics import top_k_exact_match
    >>> y_true = np.array([[0, 1, 1, 0], [1, 0, 1, 0]], "float32")
    >>> y_pred = np.array([[0.1, 0.9, 0.8, 0.2], [0.9, 0.8, 0.1, 0.2]])
    >>> match = top_k_exact_match(y_true, y_pred, k=2)
    >>> keras.ops.convert_to_numpy(match).tolist()
    [1.0, 0.0]
    """
    y_pred = ops.convert_to_tensor(y_pred)
    labelled = ops.greater(ops.convert_to_tensor(y_true), 0.5)
    _, indices = ops.top_k(y_pred, k=k)
    predicted = ops.sum(
        ops.one_hot(indices, ops.shape(y_pred)[-1], dtype="int32"), axis=1
    )
    same = ops.equal(ops.greater(predicted, 0), labelled)
    return ops.cast(ops.all(same, axis=-1), "float32")


@keras.saving.register_keras_serializable(package="keras_capsules")
class TopKExactMatch(keras.metrics.MeanMetricWrapper):
    """Fraction of samples whose `k` highest scores are exactly their labels.

    The metric of the MultiMNIST experiment of Sabour et al. (2017): with
    `k=2`, a pair of overlapping digits counts as classified only when both
    digits are recognised (see `top_k_exact_match`). `CapsNet` compiles it
    by default when built with `num_objects=2`.

    Args:
        k: Positive int, the number of labels per sample. Defaults to `2`.
        name: String, the metric's name. Defaults to
            `"top_k_exact_match"`.
        dtype: Optional dtype of the metric's result.

    Raises:
        ValueError: If `k` is not a positive integer.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> metric = keras_capsules.metrics.TopKExactMatch(k=2)
    >>> metric.update_state(
    ...     np.array([[0, 1, 1, 0], [1, 0, 1, 0]], "float32"),
    ...     np.array([[0.1, 0.9, 0.8, 0.2], [0.9, 0.8, 0.1, 0.2]]),
    ... )
    >>> float(metric.result())
    0.5

    Reference:
        - [Sabour et al., 2017](https://arxiv.org/abs/1710.09829)
    """

    def __init__(self, k=2, name="top_k_exact_match", dtype=None):
        k = check_positive_int(k, "k")
        super().__init__(top_k_exact_match, name=name, dtype=dtype, k=k)
        self.k = k

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype, "k": self.k}
