"""examples/ run as written on the tiny models."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import REPO, run_process

pytestmark = pytest.mark.engine


def test_offline_example_prints_acceptance(tiny):
    proc = run_process([os.path.join(REPO, "examples", "offline_acceptance.py")], None, 900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    print(f"\nexamples/offline_acceptance.py: {summary}")
    assert summary["drafts"] > 0
    assert summary["acceptance_length"] > 1 and len(summary["acceptance_by_position"]) == 3
