import pytest

from vllm_kimi_eagle import tiny_models


@pytest.fixture(scope="session")
def tiny():
    """The tiny Kimi models folder, built once (cached across sessions by builder version)."""
    return tiny_models.ensure_tiny_models()
