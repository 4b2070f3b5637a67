"""Unsupervised classification accuracy: clusters matched to classes, as
the Stacked Capsule Autoencoders paper measures it."""

import importlib

import numpy as np

from keras_capsules._validation import check_int
from keras_capsules._validation import check_positive_int


def _require(module):
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            "Clustering accuracy needs scikit-learn and SciPy: "
            'pip install "keras-capsules[evaluation]"'
        ) from error


def bipartite_accuracy(clusters, labels, num_classes=10):
    """Accuracy of cluster assignments after matching clusters to classes.

    Each cluster is matched to one class, one-to-one, so as to maximise
    the number of correctly labelled examples (the Hungarian method,
    `scipy.optimize.linear_sum_assignment`), and the accuracy of that
    labelling is returned; as the official Stacked Capsule Autoencoders
    evaluation computes it, with as many clusters as classes.

    Args:
        clusters: Int array of shape `(N,)`, cluster indices in
            `[0, num_classes)`.
        labels: Int array of shape `(N,)`, class indices.
        num_classes: Positive int. Defaults to `10`.

    Returns:
        A float in `[0, 1]`.

    Example:

    >>> import numpy as np
    >>> from keras_capsules import metrics
    >>> metrics.bipartite_accuracy(
    ...     np.array([2, 2, 0, 1]), np.array([0, 0, 1, 1]), num_classes=3
    ... )
    0.75
    """
    optimize = _require("scipy.optimize")
    num_classes = check_positive_int(num_classes, "num_classes")
    clusters = np.asarray(clusters).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    if clusters.shape != labels.shape:
        raise ValueError(
            "Arguments clusters and labels must hold one entry per example. "
            f"Received: clusters.shape={clusters.shape}, "
            f"labels.shape={labels.shape}"
        )
    counts = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(counts, (labels, clusters), 1)
    rows, cols = optimize.linear_sum_assignment(-counts)
    return float(counts[rows, cols].sum() / len(labels))


def kmeans_accuracy(
    features,
    labels,
    num_classes=10,
    fit_features=None,
    seed=0,
    max_iter=1000,
):
    """k-means on capsule features, scored by `bipartite_accuracy`.

    k-means with `num_classes` clusters (scikit-learn's `KMeans`, 10
    initialisations, `max_iter=1000` as in the official evaluation) is
    fitted on `fit_features` and assigns `features` to clusters, which
    are then matched to `labels`.

    The official evaluation of Stacked Capsule Autoencoders fits k-means
    on the very features it scores (its test accuracy comes from k-means
    fitted on the test images): leave `fit_features=None` for that. For a
    strict protocol, pass the training images' features as
    `fit_features` and score the test images' `features`.

    Args:
        features: Float array `(N, dim)`, e.g. object capsule presences.
        labels: Int array `(N,)`.
        num_classes: Positive int, the number of clusters and classes.
            Defaults to `10`.
        fit_features: Optional float array `(M, dim)` to fit k-means on.
            Defaults to `None` (`features`).
        seed: Int, k-means' random state. Defaults to `0`.
        max_iter: Positive int. Defaults to `1000`.

    Returns:
        A float in `[0, 1]`.

    Example:

    >>> import numpy as np
    >>> from keras_capsules import metrics
    >>> features = np.repeat(np.eye(3), 5, axis=0)
    >>> labels = np.repeat([2, 0, 1], 5)
    >>> metrics.kmeans_accuracy(features, labels, num_classes=3)
    1.0
    """
    cluster = _require("sklearn.cluster")
    num_classes = check_positive_int(num_classes, "num_classes")
    seed = check_int(seed, "seed")
    max_iter = check_positive_int(max_iter, "max_iter")
    features = np.asarray(features, dtype="float64")
    if features.ndim != 2:
        raise ValueError(
            "Argument features must have shape (N, dim). "
            f"Received: features.shape={features.shape}"
        )
    if fit_features is None:
        fit_features = features
    kmeans = cluster.KMeans(
        n_clusters=num_classes, n_init=10, max_iter=max_iter, random_state=seed
    )
    kmeans.fit(np.asarray(fit_features, dtype="float64"))
    return bipartite_accuracy(kmeans.predict(features), labels, num_classes)
