"""The two layouts of convolutional EM votes, as objects that know their axes.

Convolutional EM routing (`_core.route_conv`) never asks which layout
its votes are in: it reads the axes from a layout object and asks it to
move tensors between the layout and the kernel tiles.
`vote_layout` builds the layout `EMConvCaps` uses, as
`_backend.routes_children_first` decides; the public `em_conv_routing`
takes its votes positions first on every backend.

- `ChildrenFirst`: votes `(children, batch, out_h, out_w, pose_rows,
  num_out, pose_cols)`, the layout a batched matmul over the children
  writes; sums over the children run over the leading axis.
- `PositionsFirst`: votes `(batch, out_h, out_w, children, num_out,
  pose_size)`, each pose in one piece.

Children are ordered `(kernel row, kernel column, input type)`, the order
of `extract_capsule_patches` flattened. Child-level tensors (activations,
assignments) have the layout's axes with size 1 on the pose axes, or, as
`children` returns them, no pose axes (and, inside the routing, a
trailing axis of parent types).
"""

from keras import ops

from keras_capsules.ops import _tiles
from keras_capsules.ops._backend import routes_children_first
from keras_capsules.ops._dtypes import matmul


def vote_layout(geometry, num_in):
    """The layout in which `EMConvCaps` writes and routes its votes on this
    backend, for the windows of a `Tiling` over `num_in` input types."""
    if routes_children_first():
        return ChildrenFirst(geometry, num_in)
    return PositionsFirst(geometry, num_in)


class VoteLayout:
    """What both layouts share: the windows (a `Tiling`) and the number of
    input types, hence of children per window."""

    def __init__(self, geometry, num_in):
        self.geometry = geometry
        self.num_in = num_in
        kernel_h, kernel_w = geometry.kernel_size
        self.num_children = kernel_h * kernel_w * num_in

    def child_level(self, tiles):
        """Tiles `(batch, out_h, out_w, kernel_h, kernel_w, num_in)` ->
        `(batch, out_h, out_w, children)`."""
        out_h, out_w = self.geometry.out_size
        return ops.reshape(tiles, (-1, out_h, out_w, self.num_children))


class ChildrenFirst(VoteLayout):
    """Votes `(children, batch, out_h, out_w, pose_rows, num_out,
    pose_cols)`."""

    child_axis = 0
    parent_axis = 5
    pose_axes = (4, 6)
    tile_order = _tiles.OFFSETS_FIRST

    def votes(self, tiles, kernel):
        """`V = M W` of every window entry, in this layout.

        `tiles` is `(batch, out_h, out_w, kernel_h, kernel_w, num_in,
        pose, pose)`, `kernel` `(kernel_h, kernel_w, num_in, num_out,
        pose, pose)`: one batched matmul over the children, rows
        (children, windows, ...) times kernels (children, ..., num_out
        ...), the official row-vector convention. Routing then reads the
        votes as the matmul writes them, and XLA transposes neither the
        votes nor their gradient (docs/performance.md, "What makes the EM
        training step fast and small").
        """
        out_h, out_w = self.geometry.out_size
        pose_size = tiles.shape[-1]
        num_out = kernel.shape[3]
        rows = ops.transpose(tiles, (3, 4, 5, 0, 1, 2, 6, 7))
        rows = ops.reshape(rows, (self.num_children, -1, pose_size))
        kernel = ops.reshape(
            ops.transpose(kernel, (0, 1, 2, 4, 3, 5)),
            (self.num_children, pose_size, num_out * pose_size),
        )
        return ops.reshape(
            matmul(rows, kernel),
            (self.num_children, -1, out_h, out_w, pose_size, num_out)
            + (pose_size,),
        )

    def parents(self, votes):
        """`(num_out, pose_size)` of `votes`."""
        return votes.shape[5], votes.shape[4] * votes.shape[6]

    def children(self, tiles):
        """Tiles `(batch, out_h, out_w, kernel_h, kernel_w, num_in)` ->
        `(children, batch, out_h, out_w)`."""
        return ops.moveaxis(self.child_level(tiles), 3, 0)

    def with_pose_axes(self, x):
        """`(child-level..., num_out)` -> the rank of the votes."""
        return x[:, :, :, :, None, :, None]

    def tiles(self, x):
        """Child-level `x` with a trailing type axis -> tiles in
        `tile_order`, `(kernel_h, kernel_w, num_in, batch, out_h, out_w,
        types)`: the children axis split, nothing transposed, and the
        batch kept an axis of its own, so that it stays split over the
        devices under data parallelism."""
        kernel_h, kernel_w = self.geometry.kernel_size
        out_h, out_w = self.geometry.out_size
        return ops.reshape(
            x,
            (kernel_h, kernel_w, self.num_in, -1, out_h, out_w, x.shape[-1]),
        )

    def from_tiles(self, tiles, types):
        """The inverse of `tiles`."""
        out_h, out_w = self.geometry.out_size
        return ops.reshape(tiles, (self.num_children, -1, out_h, out_w, types))

    def poses(self, mean):
        """The routed means -> poses `(batch, out_h, out_w, num_out,
        pose_size)`."""
        out_h, out_w = self.geometry.out_size
        num_out, pose_size = self.parents(mean)
        mean = ops.transpose(ops.squeeze(mean, axis=0), (0, 1, 2, 4, 3, 5))
        return ops.reshape(mean, (-1, out_h, out_w, num_out, pose_size))

    def assignments(self, assignments):
        """`R` in this layout -> `(batch, out_h, out_w, children,
        num_out)`."""
        assignments = ops.squeeze(assignments, axis=self.pose_axes)
        return ops.transpose(assignments, (1, 2, 3, 0, 4))


class PositionsFirst(VoteLayout):
    """Votes `(batch, out_h, out_w, children, num_out, pose_size)`."""

    child_axis = 3
    parent_axis = 4
    pose_axes = (5,)
    tile_order = _tiles.OFFSETS_LAST

    def votes(self, tiles, kernel):
        """`V = M W` of every window entry, in this layout.

        `torch.compile` reads the 16 pose elements of a vote 8 at a time
        only if they are adjacent: each window's whole 4x4 pose is one
        matmul row against the kernel spread over the pose rows (kron(I,
        W), 4x the multiply-adds of a small matmul whose cost is writing
        the votes), so that every (child, parent) pose is written in one
        piece (docs/performance.md, "PyTorch: compile the training
        step").
        """
        out_h, out_w = self.geometry.out_size
        pose_size = tiles.shape[-1]
        num_out = kernel.shape[3]
        rows = ops.transpose(tiles, (3, 4, 5, 0, 1, 2, 6, 7))
        rows = ops.reshape(rows, (self.num_children, -1, pose_size**2))
        eye = ops.eye(pose_size, dtype=kernel.dtype)
        kernel = ops.reshape(
            ops.einsum("sp,xyicqr->xyisqcpr", eye, kernel),
            (self.num_children, pose_size**2, num_out * pose_size**2),
        )
        votes = ops.reshape(
            matmul(rows, kernel),
            (self.num_children, -1, out_h, out_w, num_out, pose_size**2),
        )
        return ops.transpose(votes, (1, 2, 3, 0, 4, 5))

    def parents(self, votes):
        """`(num_out, pose_size)` of `votes`."""
        return votes.shape[4], votes.shape[5]

    def children(self, tiles):
        """Tiles `(batch, out_h, out_w, kernel_h, kernel_w, num_in)` ->
        `(batch, out_h, out_w, children)`."""
        return self.child_level(tiles)

    def with_pose_axes(self, x):
        """`(child-level..., num_out)` -> the rank of the votes."""
        return x[..., None]

    def tiles(self, x):
        """Child-level `x` with a trailing type axis -> tiles in
        `tile_order`, `(batch, out_h, out_w, kernel_h, kernel_w, num_in *
        types)`."""
        kernel_h, kernel_w = self.geometry.kernel_size
        out_h, out_w = self.geometry.out_size
        channels = self.num_in * x.shape[-1]
        return ops.reshape(x, (-1, out_h, out_w, kernel_h, kernel_w, channels))

    def from_tiles(self, tiles, types):
        """The inverse of `tiles`."""
        out_h, out_w = self.geometry.out_size
        return ops.reshape(tiles, (-1, out_h, out_w, self.num_children, types))

    def poses(self, mean):
        """The routed means -> poses `(batch, out_h, out_w, num_out,
        pose_size)`."""
        out_h, out_w = self.geometry.out_size
        num_out, pose_size = self.parents(mean)
        return ops.reshape(mean, (-1, out_h, out_w, num_out, pose_size))

    def assignments(self, assignments):
        """`R` in this layout -> `(batch, out_h, out_w, children,
        num_out)`."""
        return ops.squeeze(assignments, axis=self.pose_axes)
