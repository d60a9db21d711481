"""The gate of the tests marked ``engine`` (tests/conftest.py): run, skip or fail."""

from __future__ import annotations

from packaging.version import Version

from tests.helpers import engine_test_action


def test_engine_tests_fail_rather_than_skip_where_they_are_the_proof():
    proven = (Version("0.32.0"),)
    assert engine_test_action(None, Version("0.32.0"), proven) == "run"
    assert engine_test_action("no MLA prefill", Version("0.32.0"), proven) == "fail"
    assert engine_test_action("no MLA prefill", Version("0.28.0"), proven) == "skip"
