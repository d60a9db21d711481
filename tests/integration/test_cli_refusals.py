"""The command line refuses what it cannot measure before it starts a server."""

from __future__ import annotations

import os

from tests.helpers import run_cli


def test_cli_refuses_before_starting_a_server(tiny, tmp_path):
    proc = run_cli("eval", "--target", os.path.join(tiny, "target"), "--draft",
                   os.path.join(tiny, "draft"), "--task", "mmlu",
                   "--out", str(tmp_path / "eval"), timeout=1200)
    assert proc.returncode == 2
    assert "mmlu_anatomy (multiple_choice)" in proc.stderr and "starting vLLM" not in proc.stderr


def test_cli_refuses_a_bad_grid_before_starting_a_server(tmp_path):
    proc = run_cli("bench-e2e", "--configs", "none,plugn", "--out", str(tmp_path), timeout=1200)
    assert proc.returncode == 2 and "unknown config(s) ['plugn']" in proc.stderr
    proc = run_cli("bench-e2e", "--target", "t", "--out", str(tmp_path), timeout=1200)
    assert proc.returncode == 2 and "both --target and --draft" in proc.stderr
    proc = run_cli("bench-e2e", "--repeats", "0", "--out", str(tmp_path), timeout=1200)
    assert proc.returncode == 2 and "--repeats: expected positive integers" in proc.stderr
    assert "starting" not in proc.stdout + proc.stderr


def test_without_a_gpu_it_says_what_it_needs_and_exits_2(tmp_path):
    proc = run_cli("gpu-check", "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "gpu-check needs" in line]
    assert len(lines) == 1 and "CUDA GPU" in lines[0] and "CUDA build of vLLM" in lines[0]
    assert not (tmp_path / "gpu-check.json").exists()
