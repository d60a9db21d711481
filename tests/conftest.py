import pytest

from vllm_kimi_eagle import tiny_models


@pytest.fixture(scope="session")
def tiny():
    """The tiny Kimi models folder, built once (cached across sessions by builder version)."""
    return tiny_models.ensure_tiny_models()


@pytest.fixture
def mla_engine_must_start():
    """Fails the test: this vLLM is one the engine tests must run on, and it cannot start
    an MLA engine (tests/helpers.py:requires_mla_engine)."""
    from tests.helpers import cpu_mla_engine_problem

    pytest.fail(f"engine tests must run on this release, but: {cpu_mla_engine_problem()}")
