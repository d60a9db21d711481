"""Fixtures of the integration tests."""

import pytest

from tests.helpers import write_config_only_models


@pytest.fixture(scope="module")
def config_models(tmp_path_factory):
    """A config-only target and kimi_k2 MLA draft (no weights), one per test module."""
    return write_config_only_models(str(tmp_path_factory.mktemp("config-only")))
