"""register() as vLLM finds it: the entry point, the draft-class choice, the version
verdict (in this process; what a fresh vLLM process makes of the plugin is in
tests/integration/test_plugin_loading.py)."""

from __future__ import annotations

import importlib.metadata

import pytest
from packaging.version import Version

from vllm_kimi_eagle import vllm_compat


def test_entry_point_is_installed():
    points = importlib.metadata.entry_points(group="vllm.general_plugins")
    ours = [p for p in points if p.value == "vllm_kimi_eagle:register"]
    assert len(ours) == 1, [p.value for p in points]
    assert ours[0].load().__name__ == "register"


def test_bad_draft_choice_is_the_default_and_a_line_naming_the_variable():
    from vllm_kimi_eagle import settings
    from vllm_kimi_eagle.architectures import draft_choice

    assert draft_choice({"VLLM_KIMI_EAGLE_DRAFT": "tree"}) == "plugin"
    [line] = settings.problems({"VLLM_KIMI_EAGLE_DRAFT": "tree"})
    assert "VLLM_KIMI_EAGLE_DRAFT='tree' is not plugin or upstream" in line
    assert draft_choice({}) == "plugin"
    assert draft_choice({"VLLM_KIMI_EAGLE_DRAFT": "UPSTREAM"}) == "upstream"


@pytest.mark.parametrize(
    "version, acts, says",
    [
        (None, False, "no vLLM is importable"),
        (Version("0.10.2"), False, "older than 0.18.1"),
        (Version("0.18.1"), False, "neither run nor read"),
        (Version("0.25.1"), False, "VLLM_KIMI_EAGLE_UNCHECKED_RELEASE=1"),
        (Version("0.26.0"), True, ""),
        (Version("0.27.1"), True, ""),
        (Version("0.28.0"), True, ""),
        (Version("0.30.0"), True, ""),
        (Version("0.28.1"), False, "neither run nor read"),
        (Version("0.32.0"), True, ""),
        (Version("0.33.0"), True, ""),
        (Version("0.34.0"), True, "newer than 0.33.0"),
    ],
)
def test_support_verdict(version, acts, says):
    act, message = vllm_compat.support_verdict(version)
    assert act is acts
    assert (says in message) if says else message == ""


def test_an_unchecked_release_is_acted_on_only_when_asked():
    act, message = vllm_compat.support_verdict(Version("0.20.0"), unchecked_allowed=True)
    assert act and "acts anyway" in message and "0.26.0-0.33.0" in message
    assert not vllm_compat.support_verdict(Version("0.10.2"), unchecked_allowed=True)[0]
    assert all(vllm_compat.checked(first) for first, _, _ in vllm_compat.CHECKED_RELEASES)
    assert vllm_compat.checked(Version("0.25.1")) is None
