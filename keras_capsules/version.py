"""The single source of the package version."""

__version__ = "1.1.0"


def version():
    return __version__
