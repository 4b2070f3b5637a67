"""NumPy references written from the papers' equations, shared by the tests.

Each is the plain definition (loops where they read more clearly), with no
concern for speed or numerical safety beyond what the definition needs: the
library is tested against these, so they must stay obviously correct. One
module, so that no test carries its own copy.
"""

import numpy as np


def squash(s, axis=-1, offset=1.0, form="rational"):
    """Eq. 1 of Sabour et al. 2017 (`form="rational"`) or the squash of
    Mazzia et al. 2021, `(1 - exp(-|s|)) s / |s|` (`form="exponential"`),
    exactly, with v = 0 at s = 0."""
    s = np.asarray(s, dtype="float64")
    squared_norm = np.sum(np.square(s), axis=axis, keepdims=True)
    norm = np.sqrt(squared_norm)
    safe_norm = np.where(norm > 0, norm, 1.0)
    if form == "exponential":
        return (1.0 - np.exp(-norm)) * s / safe_norm
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


def depthwise_conv2d(x, kernel, strides, padding):
    """Each channel c filtered alone by its kernels kernel[..., c, :];
    output channel c * multiplier + m."""
    channels = kernel.shape[2]
    return np.concatenate(
        [
            conv2d(x[..., c : c + 1], kernel[:, :, c : c + 1], strides, padding)
            for c in range(channels)
        ],
        axis=-1,
    )


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


def self_attention_routing(votes, prior=None, squash_form="exponential"):
    """Self-attention routing of Mazzia et al. 2021, as the authors' code
    computes it: for each parent j, the matrix A_j = U_j U_j^T / sqrt(d) of
    the dot products between its votes, its row sums as logits, a softmax
    over the parents, the prior added after it, the weighted sum and the
    squash.

    `votes` is `(batch, num_in, num_out, dim)`. Returns the output capsules
    and the coefficients that weighted the votes.
    """
    votes = np.asarray(votes, dtype="float64")
    batch, num_in, num_out, dim = votes.shape
    logits = np.zeros((batch, num_in, num_out))
    for b in range(batch):
        for j in range(num_out):
            attention = votes[b, :, j] @ votes[b, :, j].T / np.sqrt(dim)
            logits[b, :, j] = attention.sum(axis=1)
    coupling = softmax(logits, axis=-1)
    if prior is not None:
        coupling = coupling + prior
    preactivation = np.zeros((batch, num_out, dim))
    for i in range(num_in):
        preactivation += coupling[:, i, :, None] * votes[:, i]
    return squash(preactivation, form=squash_form), coupling


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


_LOG_2PI = np.log(2.0 * np.pi)


def em_routing(
    votes,
    activations,
    connected,
    beta_v,
    beta_a,
    iterations,
    final_lambda=0.01,
    min_variance=5e-4,
    epsilon=1e-7,
    mode="official",
    parent_types=None,
):
    """EM routing from the equations, one parent at a time.

    `votes` is `(batch, children, parents, D)`, `activations` `(batch,
    children)` and `connected` a `(children, parents)` 0/1 matrix of which
    child feeds which parent (all ones for the dense case). By default a
    child's assignments start uniform over its parents and are normalised
    over all of them. With `parent_types` (the output type of every
    parent), they start at `1 / num_types` for every parent and are
    normalised over the parents of each type separately: the official
    convolutional E-step.
    """
    votes = votes.astype("float64")
    activations = activations.astype("float64")
    batch, num_children, num_parents, dim = votes.shape
    if parent_types is None:
        groups = [np.ones(num_parents, bool)]
        fan_out = np.maximum(connected.sum(axis=1, keepdims=True), 1)
    else:
        groups = [parent_types == t for t in range(parent_types.max() + 1)]
        fan_out = len(groups)
    r = np.broadcast_to(connected / fan_out, (batch,) + connected.shape)
    previous_mean = np.zeros((batch, num_parents, dim))
    for iteration in range(iterations):
        if mode == "official":
            lam = final_lambda * (1 - 0.95 ** (iteration + 1))
        else:
            lam = final_lambda * (iteration + 1) / iterations
        mean = np.zeros((batch, num_parents, dim))
        variance = np.zeros((batch, num_parents, dim))
        logit = np.zeros((batch, num_parents))
        for j in range(num_parents):
            weight = r[:, :, j] * activations * connected[:, j]
            mass = weight.sum(axis=1) + epsilon
            mu = np.einsum("bi,bih->bh", weight, votes[:, :, j])
            mu = mu / mass[:, None]
            if mode == "official":
                mu = 0.9 * mu + 0.1 * previous_mean[:, j]
            deviation = votes[:, :, j] - mu[:, None]
            var = (
                min_variance
                + np.einsum("bi,bih->bh", weight, deviation**2)
                / (mass[:, None])
            )
            if mode == "official":
                logit[:, j] = lam * (
                    mass
                    * (
                        -np.log(var).sum(axis=1)
                        - beta_v[j] * dim * (_LOG_2PI + 1)
                    )
                    - 5000 * beta_a[j]
                )
            else:
                cost = (beta_v[j] + np.log(np.sqrt(var))) * mass[:, None]
                logit[:, j] = lam * (beta_a[j] - cost.sum(axis=1))
            mean[:, j], variance[:, j] = mu, var
        previous_mean = mean
        if iteration == iterations - 1:
            break
        parent_activation = 1.0 / (1.0 + np.exp(-logit))
        log_p = np.zeros((batch, num_children, num_parents))
        for j in range(num_parents):
            deviation = votes[:, :, j] - mean[:, None, j]
            log_gauss = -0.5 * (
                _LOG_2PI + np.log(variance[:, None, j])
            ) - deviation**2 / (2 * variance[:, None, j])
            log_p[:, :, j] = np.log(parent_activation[:, None, j]) + (
                log_gauss.sum(axis=-1)
            )
        log_p = np.where(connected > 0, log_p, -np.inf)
        r = np.zeros_like(log_p)
        for group in groups:
            part = log_p[..., group]
            top = part.max(axis=-1, keepdims=True)
            part = np.exp(part - np.where(np.isfinite(top), top, 0.0))
            r[..., group] = part / np.maximum(
                part.sum(axis=-1, keepdims=True), 1e-300
            )
    return mean, 1.0 / (1.0 + np.exp(-logit)), r


def _axis_geometry(size, kernel, stride, padding):
    """Output size and leading pad of one axis (TensorFlow "same")."""
    if padding == "same":
        out = -(-size // stride)
        return out, max((out - 1) * stride + kernel - size, 0) // 2
    return (size - kernel) // stride + 1, 0


def extract_patches(x, kernel_size, strides, padding):
    batch, height, width = x.shape[:3]
    out_h, top = _axis_geometry(height, kernel_size[0], strides[0], padding)
    out_w, left = _axis_geometry(width, kernel_size[1], strides[1], padding)
    out = np.zeros((batch, out_h, out_w) + kernel_size + x.shape[3:])
    for i in range(out_h):
        for j in range(out_w):
            for u in range(kernel_size[0]):
                for v in range(kernel_size[1]):
                    row = i * strides[0] + u - top
                    col = j * strides[1] + v - left
                    if 0 <= row < height and 0 <= col < width:
                        out[:, i, j, u, v] = x[:, row, col]
    return out


def fold_patches(patches, grid_size, strides, padding, reduction):
    batch, out_h, out_w, kernel_h, kernel_w = patches.shape[:5]
    _, top = _axis_geometry(grid_size[0], kernel_h, strides[0], padding)
    _, left = _axis_geometry(grid_size[1], kernel_w, strides[1], padding)
    shape = (batch,) + tuple(grid_size) + patches.shape[5:]
    out = np.full(shape, -np.inf if reduction == "max" else 0.0)
    for i in range(out_h):
        for j in range(out_w):
            for u in range(kernel_h):
                for v in range(kernel_w):
                    row = i * strides[0] + u - top
                    col = j * strides[1] + v - left
                    if 0 <= row < grid_size[0] and 0 <= col < grid_size[1]:
                        entry = patches[:, i, j, u, v]
                        if reduction == "max":
                            out[:, row, col] = np.maximum(
                                out[:, row, col], entry
                            )
                        else:
                            out[:, row, col] += entry
    return np.where(np.isinf(out), 0.0, out)


def add_coordinates(votes, placement, scale):
    votes = np.array(votes, dtype="float64")
    height, width = votes.shape[1:3]
    pose_w = votes.shape[-1]
    for i in range(height):
        for j in range(width):
            if scale is None:
                row, col = (i + 0.5) / height, (j + 0.5) / width
            else:
                row, col = (i + 0.5) * scale, (j + 0.5) * scale
            if placement == "official":
                votes[:, i, j, ..., 0, 0] += row
                votes[:, i, j, ..., 0, 1] += col
            else:
                votes[:, i, j, ..., 0, pose_w - 1] += row
                votes[:, i, j, ..., 1, pose_w - 1] += col
    return votes


def em_conv_votes(poses, kernel, kernel_size, strides):
    """V = M W for every window entry, by explicit loops (valid padding)."""
    batch, height, width, num_in = poses.shape[:4]
    num_out = kernel.shape[3]
    out_h = (height - kernel_size) // strides + 1
    out_w = (width - kernel_size) // strides + 1
    votes = np.zeros(
        (batch, out_h, out_w, kernel_size, kernel_size, num_in, num_out, 4, 4)
    )
    for i in range(out_h):
        for j in range(out_w):
            for u in range(kernel_size):
                for v in range(kernel_size):
                    for c in range(num_in):
                        for d in range(num_out):
                            pose = poses[:, i * strides + u, j * strides + v, c]
                            votes[:, i, j, u, v, c, d] = (
                                pose @ kernel[u, v, c, d]
                            )
    return votes.reshape(
        batch, out_h, out_w, kernel_size * kernel_size * num_in, num_out, 16
    )


def em_class_votes(poses, kernel, placement, scale):
    """V = M W per (position, input type, class), plus the coordinates
    unless `placement` is None."""
    batch, height, width, num_in = poses.shape[:4]
    num_classes = kernel.shape[1]
    votes = np.zeros((batch, height, width, num_in, num_classes, 4, 4))
    for i in range(height):
        for j in range(width):
            for c in range(num_in):
                for d in range(num_classes):
                    votes[:, i, j, c, d] = poses[:, i, j, c] @ kernel[c, d]
    if placement is not None:
        votes = add_coordinates(votes, placement, scale)
    return votes.reshape(batch, height * width * num_in, num_classes, 16)


def affine_warp(
    image, rotation, shear, scale_x, scale_y, shift_x, shift_y, out_shape
):
    """The affine warp of `datasets.affine_mnist`, one output pixel at a
    time: around the image centres, with `x` right and `y` up, a point `p`
    goes to `R(rotation) H(shear) S(scale_x, scale_y) p + (shift_x,
    -shift_y)`; each output pixel is the bilinear interpolation of the input
    at the point it comes from, with zeros outside the input."""
    image = np.asarray(image, dtype="float64")
    height, width = image.shape
    out_height, out_width = out_shape
    theta = np.deg2rad(rotation)
    rotation_matrix = np.array(
        [[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]]
    )
    shear_matrix = np.array([[1.0, shear], [0.0, 1.0]])
    scale_matrix = np.array([[scale_x, 0.0], [0.0, scale_y]])
    inverse = np.linalg.inv(rotation_matrix @ shear_matrix @ scale_matrix)
    out = np.zeros(out_shape)
    for row in range(out_height):
        for col in range(out_width):
            x = col - (out_width - 1) / 2 - shift_x
            y = (out_height - 1) / 2 + shift_y - row
            source_x, source_y = inverse @ np.array([x, y])
            source_col = (width - 1) / 2 + source_x
            source_row = (height - 1) / 2 - source_y
            row0, col0 = int(np.floor(source_row)), int(np.floor(source_col))
            for r in (row0, row0 + 1):
                for c in (col0, col0 + 1):
                    if 0 <= r < height and 0 <= c < width:
                        weight = (1 - abs(source_row - r)) * (
                            1 - abs(source_col - c)
                        )
                        out[row, col] += weight * image[r, c]
    return out


# The authors' three Efficient-CapsNet graphs (EscVM/Efficient-CapsNet,
# models/efficient_capsnet_graph_*.py): the strides of the four
# convolutions and of the primary capsules, the activation after each
# convolution and the number of objects decoded per image.
AUTHORS_GRAPHS = {
    "mnist": {
        "strides": (1, 1, 1, 2),
        "primary_strides": 1,
        "activation": "relu",
        "num_objects": 1,
    },
    "multimnist": {
        "strides": (1, 1, 2, 2),
        "primary_strides": 2,
        "activation": "relu",
        "num_objects": 2,
    },
    "smallnorb": {
        "strides": (2, 1, 1, 2),
        "primary_strides": 1,
        "activation": "leaky_relu",
        "num_objects": 1,
    },
}


def authors_squash(s):
    """The exponential squash as the authors' code computes it, with 1e-20
    added to exp(|s|) and to |s|."""
    norm = np.sqrt(np.sum(np.square(s), axis=-1, keepdims=True))
    return (1.0 - 1.0 / (np.exp(norm) + 1e-20)) * s / (norm + 1e-20)


def grouped_conv2d(x, kernel, strides, groups):
    """A valid convolution in `groups` groups: the channels of the input
    and of the output are split into `groups` consecutive blocks, and block
    g of the output is the convolution of block g of the input alone;
    `kernel` is `(h, w, channels / groups, filters)`."""
    size_in = x.shape[-1] // groups
    size_out = kernel.shape[-1] // groups
    return np.concatenate(
        [
            conv2d(
                x[..., g * size_in : (g + 1) * size_in],
                kernel[..., g * size_out : (g + 1) * size_out],
                strides,
                "valid",
            )
            for g in range(groups)
        ],
        axis=-1,
    )


def batch_normalization(x, gamma, beta, mean, variance, epsilon=1e-3):
    """Batch normalisation at inference, with the moving statistics."""
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def instance_normalization(x, gamma, beta, epsilon=1e-3):
    """Each channel of each image normalised over its positions."""
    mean = x.mean(axis=(1, 2), keepdims=True)
    variance = x.var(axis=(1, 2), keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def leaky_relu(x, slope):
    return np.where(x > 0, x, slope * x)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def upsample_bilinear(x, factor):
    """Bilinear upsampling with half-pixel centres: output pixel `o` of an
    axis of `n` pixels reads the input at `(o + 0.5) / factor - 0.5`,
    clamped to `[0, n - 1]`, between its two nearest pixels."""

    def interpolation(size):
        matrix = np.zeros((size * factor, size))
        for out in range(size * factor):
            source = min(max((out + 0.5) / factor - 0.5, 0.0), size - 1.0)
            low = int(np.floor(source))
            high = min(low + 1, size - 1)
            matrix[out, low] += 1.0 - (source - low)
            matrix[out, high] += source - low
        return matrix

    rows, cols = interpolation(x.shape[1]), interpolation(x.shape[2])
    return np.einsum("ph,qw,bhwc->bpqc", rows, cols, x)


def authors_fc_caps(capsules, kernel, prior):
    """The authors' FCCaps on `(batch, num_in, dim_in)` capsules, with
    their weights in their layout: `kernel` `(num_out, num_in, dim_in,
    dim)` and `prior` `(num_out, num_in, 1)`. For each parent j, the votes
    U_j for it, the row sums of U_j U_j^T / sqrt(dim) as logits, a softmax
    over the parents, the prior added, the weighted sum and their squash."""
    votes = np.einsum("bid,jide->bjie", capsules, kernel)
    batch, num_out, _, dim = votes.shape
    logits = np.zeros(votes.shape[:-1])
    for b in range(batch):
        for j in range(num_out):
            attention = votes[b, j] @ votes[b, j].T / np.sqrt(dim)
            logits[b, j] = attention.sum(axis=1)
    coupling = softmax(logits, axis=1) + prior[..., 0]
    return authors_squash(np.einsum("bji,bjie->bje", coupling, votes))


def authors_efficient_capsnet(images, weights, preset):
    """The forward pass of the authors' Efficient-CapsNet at inference.

    `weights` holds the arrays of their weight file, in its layout:
    `"convs"` (four `(kernel, bias)`), `"norms"` (four `(gamma, beta,
    moving_mean, moving_variance)` or `(gamma, beta)` for instance
    normalisation), `"primary"` (the grouped convolution's `(h, w, 1,
    128)` kernel and bias), `"fc_caps"` (`(kernel, prior)`, see
    `authors_fc_caps`) and `"decoder"` (its `(kernel, bias)` in order).

    Returns the class-capsule lengths and the reconstructions from the
    longest capsule, or with two objects from each of the two longest,
    `(batch, 2) + image shape`.
    """
    graph = AUTHORS_GRAPHS[preset]
    x = np.asarray(images, dtype="float64")
    batch = x.shape[0]
    for (kernel, bias), norm, stride in zip(
        weights["convs"], weights["norms"], graph["strides"]
    ):
        x = conv2d(x, kernel, (stride, stride), "valid") + bias
        if graph["activation"] == "relu":
            x = np.maximum(x, 0.0)
        else:
            x = leaky_relu(x, 0.3)
        if len(norm) == 4:
            x = batch_normalization(x, *norm)
        else:
            x = instance_normalization(x, *norm)
    kernel, bias = weights["primary"]
    stride = graph["primary_strides"]
    x = grouped_conv2d(x, kernel, (stride, stride), x.shape[-1]) + bias
    primary = authors_squash(x.reshape(batch, -1, 8))
    capsules = authors_fc_caps(primary, *weights["fc_caps"])
    lengths = np.sqrt(np.sum(np.square(capsules), axis=-1) + 1e-7)
    num_classes = capsules.shape[1]
    ranked = np.argsort(-lengths, axis=-1)
    reconstructions = []
    for k in range(graph["num_objects"]):
        mask = np.eye(num_classes)[ranked[:, k]]
        masked = (capsules * mask[..., None]).reshape(batch, -1)
        reconstructions.append(
            _authors_decoder(masked, weights["decoder"], images.shape[1:])
        )
    if graph["num_objects"] == 1:
        return lengths, reconstructions[0]
    return lengths, np.stack(reconstructions, axis=1)


def _authors_decoder(x, layers, image_shape):
    if len(layers) == 3:
        # Dense ReLU layers, then a sigmoid per pixel.
        for kernel, bias in layers[:-1]:
            x = np.maximum(x @ kernel + bias, 0.0)
        kernel, bias = layers[-1]
        return sigmoid(x @ kernel + bias).reshape((-1,) + image_shape)
    # smallNORB: a linear 8x8 map, three rounds of 2x bilinear upsampling
    # and a LeakyReLU(0.2) convolution, a sigmoid convolution.
    (kernel, bias), *convolutions = layers
    x = (x @ kernel + bias).reshape(-1, 8, 8, 1)
    for kernel, bias in convolutions[:-1]:
        x = upsample_bilinear(x, 2)
        x = leaky_relu(conv2d(x, kernel, (1, 1), "valid") + bias, 0.2)
    kernel, bias = convolutions[-1]
    return sigmoid(conv2d(x, kernel, (1, 1), "valid") + bias)


def extract_image_patches(images, sizes, strides, rates):
    """TensorFlow's `tf.image.extract_patches` (TF1's
    `tf.extract_image_patches`) with `padding="VALID"`, by its definition.

    `images` is `(batch, rows, cols, depth)`. A patch samples a window of
    `sizes` entries spaced `rates` apart (a kernel dilated to
    `sizes + (sizes - 1) * (rates - 1)`), placed every `strides`; output
    `(batch, out_rows, out_cols, sizes[0] * sizes[1] * depth)`, each patch
    flattened in (patch row, patch column, depth) order, with
    `out = (size - dilated) // stride + 1` on each axis.
    """
    batch, rows, cols, depth = images.shape
    spans = [k + (k - 1) * (r - 1) for k, r in zip(sizes, rates)]
    out_rows = (rows - spans[0]) // strides[0] + 1
    out_cols = (cols - spans[1]) // strides[1] + 1
    out = np.zeros((batch, out_rows, out_cols, sizes[0], sizes[1], depth))
    for i in range(out_rows):
        for j in range(out_cols):
            for u in range(sizes[0]):
                for v in range(sizes[1]):
                    row = i * strides[0] + u * rates[0]
                    col = j * strides[1] + v * rates[1]
                    out[:, i, j, u, v] = images[:, row, col]
    return out.reshape(batch, out_rows, out_cols, -1)


def _log_sigmoid(x):
    return np.minimum(x, 0.0) - np.log1p(np.exp(-np.abs(x)))


def official_class_routing(
    wx,
    input_activation,
    activation_biases,
    sigma_biases,
    num_routing,
    final_beta,
    min_var=5e-4,
):
    """The official class-layer EM routing: google-research capsule_em,
    `em_layers.py`, `update_em_routing` (with `leaky=False`, the default
    `leaky` flag), as `connector_capsule_mat` calls it.

    `wx` is `(batch, indim, outdim, outatom)`, the reference's `Wx`
    without its trailing height and width of size 1; `input_activation`
    `(batch, indim)`; the biases `(outdim,)`. Pass the `final_beta` the
    routing receives (the caller's divided by 4). Returns the activation
    logits `(batch, outdim)` and the centres `(batch, outdim, outatom)`.
    """
    wx = np.asarray(wx, dtype="float64")
    activation = np.asarray(input_activation, "float64")[:, :, None, None]
    batch, indim, outdim, atoms = wx.shape
    beta_a = np.asarray(activation_biases, dtype="float64")[:, None]
    beta_v = np.asarray(sigma_biases, dtype="float64")[:, None]
    # The prior update starts at zero: a uniform softmax over outdim.
    update = np.zeros((batch, indim, outdim, 1))
    center = np.zeros((batch, 1, outdim, atoms))
    for i in range(num_routing):
        beta = final_beta * (1 - 0.95 ** (i + 1))
        posterior = softmax(update, axis=2)
        vote_conf = posterior * activation
        masses = vote_conf.sum(axis=1, keepdims=True) + 1e-5
        center = (
            0.9 * (vote_conf * wx).sum(axis=1, keepdims=True) / masses
            + 0.1 * center
        )
        noise = (wx - center) ** 2
        variance = min_var + (vote_conf * noise).sum(1, keepdims=True) / masses
        log_det = np.log(variance).sum(axis=3, keepdims=True)
        win = masses * (-log_det - beta_v * atoms * (_LOG_2PI + 1.0))
        logit = beta * (win - beta_a * 5000)
        update = (
            _log_sigmoid(logit)
            - (atoms * _LOG_2PI + log_det) / 2.0
            - (noise / (2 * variance)).sum(axis=3, keepdims=True)
        )
    return logit[:, 0, :, 0], center[:, 0]


def official_conv_routing(
    wx,
    input_activation,
    activation_biases,
    sigma_biases,
    num_routing,
    final_beta,
    min_var=5e-4,
):
    """The official convolutional EM routing: google-research capsule_em,
    `em_layers.py`, `update_conv_routing`, as `conv_capsule_mat` calls it.

    `wx` is `(batch, indim, outdim, outatom, height, width, k, k)` (the
    reference's layout: output position, then kernel offset),
    `input_activation` `(batch, indim, height, width, k, k)`, the
    activation of the child behind each window entry, and the biases
    `(outdim,)`. Returns the activation logits `(batch, outdim, height,
    width)` and the centres `(batch, outdim, outatom, height, width)`.

    The E-step shifts `log p` by one maximum per (example, input type,
    output type) over every position and kernel offset, adds 1e-7 to the
    sums, and sums the entries of output position `p` and kernel offset
    `t` by `p + t` on each axis. The reference does this by laying the
    kernel offsets of each position out on a `(height * k, width * k)`
    grid, padding it by `(k - 1) ** 2`, taking `k x k` patches at stride
    `k` with rate `k - 1`, summing them, and taking `k x k` patches of the
    sums at stride 1; so does this transcription. (The reference reshapes
    that grid to `n * k` squared, square outputs only; rows and columns
    are kept apart here, the same for square grids.)
    """
    wx = np.asarray(wx, dtype="float64")
    batch, indim, outdim, atoms, height, width, k, _ = wx.shape
    activation = np.asarray(input_activation, dtype="float64")[:, :, None, None]
    shape = (1, 1, outdim, 1, 1, 1, 1, 1)
    beta_a = np.reshape(np.asarray(activation_biases, "float64"), shape)
    beta_v = np.reshape(np.asarray(sigma_biases, "float64"), shape)
    summed_axes = (1, 6, 7)
    # softmax over outdim of zeros.
    posterior = np.full((batch, indim, outdim, 1, height, width, k, k), 1.0)
    posterior /= outdim
    center = np.zeros((batch, 1, outdim, atoms, height, width, 1, 1))
    for i in range(num_routing):
        beta = final_beta * (1 - 0.95 ** (i + 1))
        vote_conf = posterior * activation
        masses = vote_conf.sum(axis=summed_axes, keepdims=True) + 1e-7
        center = (
            0.9 * (vote_conf * wx).sum(axis=summed_axes, keepdims=True) / masses
            + 0.1 * center
        )
        noise = (wx - center) ** 2
        variance = (
            min_var
            + (vote_conf * noise).sum(axis=summed_axes, keepdims=True) / masses
        )
        log_det = np.log(variance).sum(axis=3, keepdims=True)
        win = masses * (-log_det - beta_v * atoms * (_LOG_2PI + 1.0))
        logit = beta * (win - beta_a * 5000)
        prior_update = (
            _log_sigmoid(logit)
            - (atoms * _LOG_2PI + log_det) / 2.0
            - (noise / (2 * variance)).sum(axis=3, keepdims=True)
        )
        prior_exp = np.exp(
            prior_update - prior_update.max(axis=(4, 5, 6, 7), keepdims=True)
        )
        laid_out = prior_exp.transpose(0, 1, 2, 3, 4, 6, 5, 7)
        laid_out = laid_out.reshape(-1, height * k, width * k, 1)
        pad = (k - 1) ** 2
        laid_out = np.pad(laid_out, [(0, 0), (pad, pad), (pad, pad), (0, 0)])
        gathered = extract_image_patches(laid_out, (k, k), (k, k), (k - 1,) * 2)
        sums = gathered.sum(axis=-1, keepdims=True)
        spread = extract_image_patches(sums, (k, k), (1, 1), (1, 1))
        spread = spread.reshape(batch, indim, outdim, 1, height, width, k, k)
        posterior = prior_exp / (spread + 1e-7)
    return logit[:, 0, :, 0, :, :, 0, 0], center[:, 0, :, :, :, :, 0, 0]


# Stacked Capsule Autoencoders, transcribed from the official TensorFlow 1
# code (akosiorek/stacked_capsule_autoencoders) with the semantics of
# Sonnet 1 and tf.contrib it relies on; file names are those of that code.


def scae_safe_log(x):
    """math_ops.safe_log: log(x), or -1e8 where x < 1e-16."""
    x = np.asarray(x, dtype="float64")
    return np.where(x < 1e-16, -1e8, np.log(np.where(x < 1e-16, 1.0, x)))


def scae_geometric_transform(params, similarity=False, nonlinear=True):
    """math_ops.geometric_transform, one pose at a time; returns the 3x3
    matrices, shape (..., 3, 3)."""
    params = np.asarray(params, dtype="float64")
    out = np.zeros(params.shape[:-1] + (3, 3))
    for index in np.ndindex(params.shape[:-1]):
        sx, sy, theta, shear, tx, ty = params[index]
        if nonlinear:
            sx, sy = 1 / (1 + np.exp(-sx)) + 0.01, 1 / (1 + np.exp(-sy)) + 0.01
            tx, ty, shear = np.tanh(5 * tx), np.tanh(5 * ty), np.tanh(5 * shear)
            theta = theta * 2 * np.pi
        else:
            sx, sy = abs(sx) + 0.01, abs(sy) + 0.01
        c, s = np.cos(theta), np.sin(theta)
        if similarity:
            top = [[sx * c, -sx * s, tx], [sx * s, sx * c, ty]]
        else:
            top = [
                [sx * c + shear * sy * s, -sx * s + shear * sy * c, tx],
                [sy * s, sy * c, ty],
            ]
        out[index] = np.array(top + [[0.0, 0.0, 1.0]])
    return out


def scae_sampling_grid(transform, output_size, source_size):
    """Sonnet 1's AffineGridWarper(output_size, source_size).inverse() for
    one transform (six numbers a, b, tx, c, d, ty): for every output pixel
    (row, col), the (x, y) source pixel it samples. Output pixels span
    [-1, 1] (first and last pixel centres); the inverse affine map takes
    them to [-1, 1] template coordinates, scaled by (size - 1) / 2 and
    shifted by the same."""
    a, b, tx, c, d, ty = np.asarray(transform, dtype="float64")
    inverse = np.linalg.inv(np.array([[a, b], [c, d]]))
    height, width = output_size
    grid = np.zeros((height, width, 2))
    for row in range(height):
        for col in range(width):
            p = np.array(
                [-1 + 2 * col / (width - 1), -1 + 2 * row / (height - 1)]
            )
            u = inverse @ (p - np.array([tx, ty]))
            grid[row, col, 0] = (u[0] + 1) * (source_size[1] - 1) / 2
            grid[row, col, 1] = (u[1] + 1) * (source_size[0] - 1) / 2
    return grid


def scae_resample(image, points):
    """tf.contrib.resampler.resampler for one image (height, width,
    channels) at points (..., 2) given as (x, y): bilinear between the
    pixels floor(p) and floor(p) + 1 (those outside the image are 0); 0
    unless -1 < x < width and -1 < y < height."""
    image = np.asarray(image, dtype="float64")
    height, width, channels = image.shape
    points = np.asarray(points, dtype="float64")
    out = np.zeros(points.shape[:-1] + (channels,))
    for index in np.ndindex(points.shape[:-1]):
        x, y = points[index]
        if not (-1 < x < width and -1 < y < height):
            continue
        fx, fy = int(np.floor(x)), int(np.floor(y))
        cx, cy = fx + 1, fy + 1
        dx, dy = cx - x, cy - y

        def pixel(col, row):
            if 0 <= col < width and 0 <= row < height:
                return image[row, col]
            return np.zeros(channels)

        out[index] = (
            dx * dy * pixel(fx, fy)
            + dx * (1 - dy) * pixel(fx, cy)
            + (1 - dx) * dy * pixel(cx, fy)
            + (1 - dx) * (1 - dy) * pixel(cx, cy)
        )
    return out


def scae_warp_templates(templates, transforms, output_size):
    """TemplateBasedImageDecoder's warping: templates (B or 1, K, h, w, C),
    transforms (B, K, 6) -> (B, K, height, width, C)."""
    templates = np.asarray(templates, dtype="float64")
    transforms = np.asarray(transforms, dtype="float64")
    batch, num = transforms.shape[:2]
    out = np.zeros((batch, num) + tuple(output_size) + templates.shape[-1:])
    for b in range(batch):
        for k in range(num):
            template = templates[b if templates.shape[0] > 1 else 0, k]
            grid = scae_sampling_grid(
                transforms[b, k], output_size, template.shape[:2]
            )
            out[b, k] = scae_resample(template, grid)
    return out


def _scae_logsumexp(x, axis):
    top = np.max(x, axis=axis, keepdims=True)
    return np.squeeze(top, axis) + np.log(np.sum(np.exp(x - top), axis=axis))


def _scae_normal_log_prob(x, mean, scale):
    return (
        -0.5 * ((x - mean) / scale) ** 2
        - np.log(scale)
        - 0.5 * np.log(2 * np.pi)
    )


def _scae_image_mixture(templates, logits, presence, background, bg_logit):
    templates = np.asarray(templates, dtype="float64")
    logits = np.asarray(logits, dtype="float64")
    batch = templates.shape[0]
    bg = np.zeros_like(templates[:, :1]) + np.asarray(background, "float64")
    components = np.concatenate([templates, bg], axis=1)
    bg_logits = np.zeros_like(logits[:, :1]) + np.asarray(bg_logit, "float64")
    logits = np.concatenate([logits, bg_logits], axis=1)
    presence = np.concatenate(
        [np.asarray(presence, "float64"), np.ones((batch, 1))], axis=1
    )
    logits = logits + scae_safe_log(presence)[:, :, None, None, None]
    log_mixing = logits - _scae_logsumexp(logits, 1)[:, None]
    return components, log_mixing


def scae_image_log_likelihood(
    images, templates, logits, presence, background, bg_logit, scale=1.0
):
    """prob.MixtureDistribution(template logits + safe_log(presence),
    [templates, scale], Normal).log_prob(images), background last."""
    components, log_mixing = _scae_image_mixture(
        templates, logits, presence, background, bg_logit
    )
    images = np.asarray(images, dtype="float64")[:, None]
    log_prob = _scae_normal_log_prob(images, components, scale)
    return _scae_logsumexp(log_prob + log_mixing, 1)


def scae_image_mode(templates, logits, presence, background, bg_logit):
    """MixtureDistribution.mode(): each pixel's most probable component."""
    components, log_mixing = _scae_image_mixture(
        templates, logits, presence, background, bg_logit
    )
    winner = np.argmax(log_mixing, axis=1)
    channels = components.shape[-1]
    winner = np.broadcast_to(winner, winner.shape[:-1] + (channels,))
    return np.take_along_axis(components, winner[:, None], axis=1)[:, 0]


def scae_part_likelihood(
    x, votes, scales, vote_presence, presence=None, normalize=False
):
    """capsule.CapsuleLikelihood, one example and one part at a time:
    returns the per-example log-likelihood (B,), the posterior (B, parts,
    objects) and the winning votes (B, parts, dim). `normalize=True` uses
    the normalised mixing log-probabilities the official code computes but
    does not use."""
    x = np.asarray(x, dtype="float64")
    votes = np.asarray(votes, dtype="float64")
    scales = np.asarray(scales, dtype="float64")
    vote_presence = np.asarray(vote_presence, dtype="float64")
    batch, num_objects, num_parts, _ = votes.shape
    dummy = -2 * np.log(10.0)
    log_likelihood = np.zeros(batch)
    posterior = np.zeros((batch, num_parts, num_objects))
    winners = np.zeros(x.shape)
    for b in range(batch):
        logits = np.append(
            scae_safe_log(vote_presence[b]).T,
            np.full((num_parts, 1), dummy),
            axis=1,
        )
        if normalize:
            logits = logits - _scae_logsumexp(logits, 1)[:, None]
        for m in range(num_parts):
            log_prob = [
                np.sum(
                    _scae_normal_log_prob(
                        x[b, m], votes[b, k, m], scales[b, k, m]
                    )
                )
                for k in range(num_objects)
            ] + [dummy]
            joint = logits[m] + np.array(log_prob)
            weight = 1.0 if presence is None else presence[b, m]
            log_likelihood[b] += weight * _scae_logsumexp(joint, 0)
            posterior[b, m] = (
                np.exp(joint - joint.max())
                / np.sum(np.exp(joint - joint.max()))
            )[:-1]
            winners[b, m] = votes[b, np.argmax(joint[:-1]), m]
    return log_likelihood, posterior, winners


def scae_sparsity(presence, kind, num_classes=10, within_constant=0.0):
    """capsule.sparsity_loss: `_caps_pres_l2` ("l2") or `_capsule_entropy`
    ("entropy"). Returns (within, between) as the official functions do:
    the l2 between-example term comes back negated, because the model
    subtracts it."""
    presence = np.asarray(presence, dtype="float64")
    batch, num_caps = presence.shape
    if kind == "l2":
        if within_constant == 0.0:
            within_constant = num_caps / num_classes
        within = np.sum((presence.sum(1) - within_constant) ** 2) / batch
        between = (
            np.sum((presence.sum(0) - batch / num_classes) ** 2) / num_caps
        )
        return within, -between

    def entropy(p):
        return -np.sum(p * scae_safe_log(p))

    within = np.mean([entropy(row / (row.sum() + 1e-8)) for row in presence])
    total = presence.sum(0)
    return within, entropy(total / (total.sum() + 1e-8))


def scae_pad_and_shift(image, output_size, y_shift, x_shift):
    """preprocess.pad_and_shift for one image (height, width, channels),
    with the shifts it drew given: pad |shift| on one side of each axis
    (before the image for a negative shift), split what is left of the
    canvas with the odd row first, crop to the canvas."""
    height, width = image.shape[:2]
    pads = []
    for size, shift in ((height, y_shift), (width, x_shift)):
        before, after = abs(min(shift, 0)), max(shift, 0)
        spare = max(output_size - (size + abs(shift)), 0)
        pads.append((before + spare // 2 + spare % 2, after + spare // 2))
    padded = np.pad(image, pads + [(0, 0)])
    return padded[:output_size, :output_size]


def _scae_layer_norm(x, gamma, beta, epsilon=1e-5):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def scae_attention(queries, keys, values, presence, heads, output):
    """attention.MultiHeadQKVAttention: per head (q, k, v) = linear maps
    `heads[i] = ((wq, bq), (wk, bk), (wv, bv))`, logits q k^T penalised
    by (1 - presence) 1e32, softmax of logits / sqrt(dim), then the linear
    map `output = (w, b)` of the concatenated heads. In float32, as the
    official code runs."""
    f32 = np.float32
    outputs = []
    for (wq, bq), (wk, bk), (wv, bv) in heads:
        q = queries.astype(f32) @ wq + bq
        k = keys.astype(f32) @ wk + bk
        v = values.astype(f32) @ wv + bv
        logits = q @ np.swapaxes(k, 1, 2)
        if presence is not None:
            logits = logits - (f32(1) - presence.astype(f32))[:, None] * f32(
                1e32
            )
        logits = logits / f32(np.sqrt(q.shape[-1]))
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights = weights / weights.sum(-1, keepdims=True)
        outputs.append(weights @ v)
    return np.concatenate(outputs, -1) @ output[0] + output[1]


def scae_set_transformer(x, presence, params):
    """attention.SetTransformer with layer norm and no dropout, from the
    weights in `params` (see tests/layers/set_transformer_test.py)."""
    h = x.astype("float32") @ params["input"][0] + params["input"][1]
    for block in params["blocks"]:
        y = scae_attention(h, h, h, presence, *block["attention"]) + h
        if presence is not None:
            y = y * presence[..., None]
        y = _scae_layer_norm(y, *block["norm_1"])
        hidden = np.maximum(y @ block["hidden"][0] + block["hidden"][1], 0)
        h = _scae_layer_norm(
            hidden @ block["projection"][0] + block["projection"][1] + y,
            *block["norm_2"],
        )
    z = h @ params["output"][0] + params["output"][1]
    seeds = np.broadcast_to(params["seeds"], (len(x),) + params["seeds"].shape)
    return scae_attention(seeds, z, z, presence, *params["pooling"])


def scae_objective(outputs, labels=None, num_classes=10, weights=None):
    """scae.py `ImageAutoencoder._loss` with run_mnist.sh's weights (or
    `weights`, keyed as `losses.StackedCapsuleAutoencoderLoss`'s
    arguments): the mean likelihoods and `dynamic_l2`, the sparsity terms
    (`scae_sparsity`, the l2 between-example term negated, as the official
    function returns it, and subtracted), and with labels the probes'
    mean cross-entropies."""
    w = {
        "part_likelihood_weight": 1.0,
        "dynamic_l2_weight": 10.0,
        "prior_within_sparsity_weight": 2.0,
        "prior_between_sparsity_weight": 0.35,
        "posterior_within_sparsity_weight": 0.7,
        "posterior_between_sparsity_weight": 0.2,
        **(weights or {}),
    }
    o = {k: np.asarray(v, dtype="float64") for k, v in outputs.items()}
    num_parts = o["part_presence"].shape[-1]
    prior_within, prior_between = scae_sparsity(
        o["object_presence"], "l2", num_classes
    )
    posterior_within, posterior_between = scae_sparsity(
        o["object_posterior_presence"] / num_parts, "entropy"
    )
    loss = (
        -o["image_log_likelihood"].mean()
        - w["part_likelihood_weight"] * o["part_log_likelihood"].mean()
        + w["dynamic_l2_weight"] * o["dynamic_l2"].mean()
        + w["prior_within_sparsity_weight"] * prior_within
        - w["prior_between_sparsity_weight"] * prior_between
        + w["posterior_within_sparsity_weight"] * posterior_within
        - w["posterior_between_sparsity_weight"] * posterior_between
    )
    if labels is not None:
        for key in ("prior_logits", "posterior_logits"):
            log_p = np.log(softmax(o[key], axis=-1))
            loss -= log_p[np.arange(len(labels)), labels].mean()
    return loss
