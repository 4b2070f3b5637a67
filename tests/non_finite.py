"""Non-finite copies of images, shared by the tests of every function that
refuses NaN and infinite images."""

import numpy as np

# What the error of each case must name, after `Received: name`.
RECEIVED = {
    "one_nan_pixel": r"\[.*\]=nan$",
    "all_nan_image": r"\[0(, 0)*\]=nan$",
    "positive_inf": r"\[.*\]=inf$",
    "negative_inf": r"\[.*\]=-inf$",
}


def non_finite_images(images, batch=True):
    """Returns `{case: float32 copy of images}` for the cases of `RECEIVED`.

    One pixel in the middle of the array is NaN, +inf or -inf, or a whole
    image is NaN: the first of the batch, or, with `batch=False` (one image
    without a batch axis), all of it.
    """
    images = np.asarray(images, dtype="float32")
    cases = {}
    for case, value in (
        ("one_nan_pixel", np.nan),
        ("positive_inf", np.inf),
        ("negative_inf", -np.inf),
    ):
        copy = images.copy()
        copy.flat[images.size // 2] = value
        cases[case] = copy
    copy = images.copy()
    if batch:
        copy[0] = np.nan
    else:
        copy[...] = np.nan
    cases["all_nan_image"] = copy
    return cases


def assert_rejected(test, call, images, name, batch=True):
    """Asserts that `call(copy)` raises, for every non-finite copy of
    `images`, the `ValueError` that names argument `name` and the value."""
    for case, copy in non_finite_images(images, batch=batch).items():
        with test.subTest(case=case):
            with test.assertRaisesRegex(
                ValueError,
                rf"Argument {name} must hold finite values.*Received: "
                rf"{name}" + RECEIVED[case],
            ):
                call(copy)
