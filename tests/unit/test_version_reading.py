"""One reading of a vLLM version in every gate (vllm_compat.has_release): the same version
strings through each feature gate, each gate against the release its feature came in."""

from __future__ import annotations

import pytest
from packaging.version import Version

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.tools.engines import vllm_runners
from vllm_kimi_eagle.tools.figures import request_metrics

# Version strings as vLLM reports them: releases, pre-releases, development builds, local
# builds, and one that names no release.
REPORTED = ["0.25.0", "0.25.1", "0.26.0.dev3", "0.26.0rc1", "0.26.0", "0.28.0",
            "0.29.0.dev0", "0.29.0rc1", "0.29.0", "0.29.1.dev5+gabc1234", "0.31.0",
            "0.32.0.dev100+gabc1234", "0.32.0", "0.32.0+cpu", "0.33.1.dev5+g1234abc", "dev"]
# gate: (whether the feature is there for a version, the release it came in)
GATES = {
    "per-request figures": (request_metrics.supported, Version("0.29.0")),
    "capture after the last layer": (vllm_compat.can_capture_after_last_layer,
                                     Version("0.25.1")),
    "Model Runner V2 by default": (lambda v: vllm_runners.default_gpu_runner(v) == "v2",
                                   Version("0.29.0")),
    "a schedule served by V2": (
        lambda v: vllm_runners.schedule_problem("v2", 1, v) is None, Version("0.32.0")),
}


def pep440(reported: str, first: Version) -> bool:
    version = vllm_compat.read_version(reported)
    return version is None or version >= first  # no release named: the newest


@pytest.mark.parametrize("reported", REPORTED)
@pytest.mark.parametrize("gate", sorted(GATES))
def test_every_gate_reads_a_version_as_pep440_orders_it(gate, reported):
    has, first = GATES[gate]
    assert has(vllm_compat.read_version(reported)) is pep440(reported, first)


def test_the_edges_the_old_readings_got_wrong():
    """A development build of the release a feature came in is not that release (the
    dropped dev part said it was); a version that names no release is the newest for
    every gate, as for the release gate (some gates took their oldest branch)."""
    dev = vllm_compat.read_version("0.29.0.dev0")
    assert not request_metrics.supported(dev)
    assert vllm_runners.default_gpu_runner(dev) == "v1"
    assert request_metrics.supported(None) and vllm_compat.can_capture_after_last_layer(None)
    assert vllm_runners.default_gpu_runner(None) == "v2"
    assert vllm_runners.schedule_problem("v2", 1, None) is None
    assert vllm_runners.schedule_problem("v2", 1, vllm_compat.read_version("0.26.0")) \
        .startswith("Model Runner V2 of vLLM 0.26.0 cannot start with a schedule")
    verdict = vllm_compat.support_verdict("0.18.0", unchecked_allowed=True)
    assert not verdict.act and "comes before 0.18.1" in verdict.message


def test_the_draft_architecture_refresh_says_whether_it_ran():
    """SpeculativeConfig.update_arch_ (0.26-0.33) refreshes vLLM's cached architecture of
    the draft; a vLLM without it is told apart, so the hook can say what stays stale."""
    from types import SimpleNamespace

    calls = []
    with_method = SimpleNamespace(update_arch_=lambda: calls.append(1))
    assert vllm_compat.refresh_draft_architecture(with_method) is True and calls == [1]
    assert vllm_compat.refresh_draft_architecture(SimpleNamespace()) is False
