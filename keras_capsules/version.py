"""The single source of the package version."""

__version__ = "1.0.0"


def version():
    return __version__
