"""NumPy references written from the papers' equations, shared by the tests.

Each is the plain definition, in float64, with no concern for speed or
numerical safety beyond what the definition needs: the library is tested
against these, so they must stay obviously correct.
"""

import numpy as np


def squash(s, axis=-1, offset=1.0):
    """Eq. 1 of Sabour et al. 2017, exactly, with v = 0 at s = 0."""
    s = np.asarray(s, dtype="float64")
    squared_norm = np.sum(np.square(s), axis=axis, keepdims=True)
    norm = np.sqrt(squared_norm)
    safe_norm = np.where(norm > 0, norm, 1.0)
    return squared_norm / (offset + squared_norm) * s / safe_norm


def softmax(x, axis=-1):
    x = np.asarray(x, dtype="float64")
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def conv2d(x, kernel, strides, padding):
    """Cross-correlation, out[o] = sum_t x[s * o + t] w[t], with
    TensorFlow's "valid"/"same" padding conventions."""
    (kernel_h, kernel_w), (stride_h, stride_w) = kernel.shape[:2], strides
    if padding == "same":
        pads = []
        for size, k, s in zip(x.shape[1:3], (kernel_h, kernel_w), strides):
            total = max((-(-size // s) - 1) * s + k - size, 0)
            pads.append((total // 2, total - total // 2))
        x = np.pad(x, [(0, 0), pads[0], pads[1], (0, 0)])
    out_h = (x.shape[1] - kernel_h) // stride_h + 1
    out_w = (x.shape[2] - kernel_w) // stride_w + 1
    out = np.zeros((x.shape[0], out_h, out_w, kernel.shape[-1]))
    for row in range(out_h):
        for col in range(out_w):
            window = x[
                :,
                row * stride_h : row * stride_h + kernel_h,
                col * stride_w : col * stride_w + kernel_w,
            ]
            out[:, row, col] = np.einsum("bhwc,hwcf->bf", window, kernel)
    return out


def dynamic_routing(votes, iterations, bias=None, leaky=False):
    """Procedure 1 of Sabour et al. 2017, with the official code's options
    (a bias before the squash; leaky routing's extra zero logit).

    `votes` is `(..., num_in, num_out, dim)`. Returns the output capsules
    and the last coupling coefficients.
    """
    votes = np.asarray(votes, dtype="float64")
    logits = np.zeros(votes.shape[:-1])
    for iteration in range(iterations):
        if leaky:
            padded = np.concatenate(
                [np.zeros(logits.shape[:-1] + (1,)), logits], axis=-1
            )
            coupling = softmax(padded)[..., 1:]
        else:
            coupling = softmax(logits)
        preactivation = np.sum(coupling[..., None] * votes, axis=-3)
        if bias is not None:
            preactivation = preactivation + bias
        outputs = squash(preactivation)
        if iteration < iterations - 1:
            logits = logits + np.sum(votes * outputs[..., None, :, :], -1)
    return outputs, coupling


def margin_loss(
    y_true,
    y_pred,
    m_plus=0.9,
    m_minus=0.1,
    down_weight=0.5,
    reduction_over_classes="sum",
):
    """Eq. 4 of Sabour et al. (2017), one class at a time."""
    y_true = np.asarray(y_true, "float64")
    y_pred = np.asarray(y_pred, "float64")
    per_class = np.zeros_like(y_pred)
    for index in np.ndindex(y_pred.shape):
        t, v = y_true[index], y_pred[index]
        per_class[index] = (
            t * max(0.0, m_plus - v) ** 2
            + down_weight * (1 - t) * max(0.0, v - m_minus) ** 2
        )
    if reduction_over_classes == "sum":
        return per_class.sum(-1)
    return per_class.mean(-1)


def spread_loss(y_true, y_pred, margin=0.2, reduction_over_classes="sum"):
    """Eq. 3 of Hinton et al. (2018), one wrong class at a time."""
    y_true = np.asarray(y_true, "float64")
    y_pred = np.asarray(y_pred, "float64")
    losses = []
    for labels, activations in zip(y_true, y_pred):
        target = int(np.argmax(labels))
        terms = [
            max(0.0, margin - (activations[target] - activations[i])) ** 2
            for i in range(len(activations))
            if i != target
        ]
        total = sum(terms)
        if reduction_over_classes == "mean":
            total /= len(activations)
        losses.append(total)
    return np.array(losses)
