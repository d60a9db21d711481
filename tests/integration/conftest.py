"""Fixtures of the integration tests."""

import pytest

from tests.helpers import preloaded_process, write_config_only_models


@pytest.fixture(scope="module")
def config_models(tmp_path_factory):
    """A config-only target and kimi_k2 MLA draft (no weights), one per test module."""
    return write_config_only_models(str(tmp_path_factory.mktemp("config-only")))


@pytest.fixture(scope="session", autouse=True)
def _preloaded_vllm():
    """This worker's preloaded vLLM (tests/helpers.preloaded_process), up before the first
    test here, so that what even the first one starts, in a tool called in this process
    too, is forked from it."""
    preloaded_process()
