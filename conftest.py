"""Pytest configuration: the `large` marker and the backend banner."""

import keras
import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--run_large",
        action="store_true",
        default=False,
        help="Run tests marked `large` (real data, long training).",
    )


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend: {keras.backend.backend()}"


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run_large"):
        return
    skip_large = pytest.mark.skip(reason="needs --run_large")
    for item in items:
        if "large" in item.keywords:
            item.add_marker(skip_large)
