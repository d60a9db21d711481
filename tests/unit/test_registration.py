"""register() as vLLM finds it: the entry point, the draft-class choice, the version
verdict (in this process; what a fresh vLLM process makes of the plugin is in
tests/integration/test_plugin_loading.py)."""

from __future__ import annotations

import importlib.metadata
import logging

import pytest
from packaging.version import Version

from vllm_kimi_eagle.compat import vllm_compat


def test_entry_point_is_installed():
    points = importlib.metadata.entry_points(group="vllm.general_plugins")
    ours = [p for p in points if p.value == "vllm_kimi_eagle:register"]
    assert len(ours) == 1, [p.value for p in points]
    assert ours[0].load().__name__ == "register"


def test_bad_draft_choice_is_the_default_and_a_line_naming_the_variable():
    from vllm_kimi_eagle import settings
    from vllm_kimi_eagle.draft.draft_class import asked_class

    assert asked_class({"VLLM_KIMI_EAGLE_DRAFT": "tree"}, verdict_act=True) == "plugin"
    [line] = settings.problems({"VLLM_KIMI_EAGLE_DRAFT": "tree"})
    assert "VLLM_KIMI_EAGLE_DRAFT='tree' is not plugin or upstream" in line
    assert asked_class({}, verdict_act=True) == "plugin"
    assert asked_class({"VLLM_KIMI_EAGLE_DRAFT": "UPSTREAM"}, verdict_act=True) == "upstream"


# The version strings vLLM reports (package metadata, else vllm.__version__), and what the
# plugin does there: (reported, acts, checks the draft class's contract first, log line).
CONTRACT = "replaces vLLM's only where the vLLM classes"
OVERRIDE = "VLLM_KIMI_EAGLE_UNCHECKED_RELEASE=1"


@pytest.mark.parametrize(
    "reported, acts, checks, says",
    [
        (None, False, False, "no vLLM is importable"),
        ("0.10.2", False, False, "vLLM 0.10.2 comes before 0.18.1"),
        ("0.17.1", False, False, "comes before 0.18.1"),
        ("0.18.1", False, False, OVERRIDE),
        ("0.25.1", False, False, "a minor neither run nor read for this plugin"),
        ("0.26.0", True, False, ""),
        ("0.26.1", True, False, ""),  # a patch release of a checked minor: the safest case
        ("0.27.1", True, False, ""),
        ("0.28.0", True, False, ""),
        ("0.28.1", True, False, ""),
        ("0.30.0", True, False, ""),
        ("0.30.7", True, False, ""),
        ("0.32.0+cpu", True, False, ""),  # a local build
        ("0.32.1", True, False, ""),
        ("0.33.0", True, False, ""),
        ("0.33.0rc1", True, False, "is a pre-release of 0.33, judged as 0.33, a minor this "
                                   "plugin was checked on"),
        ("0.32.0.dev100+gabc1234", True, True, "is a development build on the way to 0.32.0 "
                                               "(it comes before that release)"),
        ("0.33.1.dev5+g1234abc", True, True, "is a development build on the way to 0.33.1"),
        ("0.18.0", False, False, "comes before 0.18.1"),  # the minor's first release lacks it
        ("0.34.0rc1", True, True, "is a pre-release of 0.34, judged as 0.34, newer than 0.33"),
        ("0.34.0", True, True, "counts as 0.34, newer than 0.33, the newest minor"),
        ("1.0.0", True, True, "newer than 0.33"),
        ("dev", True, True, "reports its version as 'dev', which names no release"),
        ("0.0.0+g1234abc", True, True, "which names no release"),  # vLLM's mark of a dev tree
        ("", True, True, "which names no release"),
    ],
)
def test_support_verdict(reported, acts, checks, says):
    verdict = vllm_compat.support_verdict(reported)
    assert (verdict.act, verdict.check_contract) == (acts, checks)
    assert (says in verdict.message) if says else verdict.message == ""
    if checks:
        assert CONTRACT in verdict.message and "vllm-kimi-eagle inspect" in verdict.message
    assert verdict.message.count("\n") == 0


def test_a_pre_release_of_a_checked_minor_is_one_info_line_the_rest_warnings():
    assert vllm_compat.support_verdict("0.33.0rc1").level == logging.INFO
    for reported in ("0.34.0rc1", "dev", "0.25.1", "0.10.2"):
        assert vllm_compat.support_verdict(reported).level == logging.WARNING, reported


@pytest.mark.parametrize("minor", [str(m) for m in vllm_compat.CHECKED_MINORS])
@pytest.mark.parametrize("suffix", [".0", ".1", ".9", ".0.post1", ".0+cpu", ".1+cu130",
                                    ".0rc1", ".1rc2", ".0.dev100+g1234abc", ".2.dev5"])
def test_every_release_of_a_checked_minor_is_judged_as_that_minor(minor, suffix):
    """Releases and release candidates act in full; a development build (.devN) comes
    before the release it leads to, under PEP 440 as in vLLM's main branch: contract
    first."""
    verdict = vllm_compat.support_verdict(minor + suffix)
    dev = ".dev" in suffix
    assert verdict.act and verdict.check_contract is dev
    assert verdict.message == "" or (f"not a release of {minor}" if dev else
                                     f"pre-release of {minor}, judged as {minor}") in verdict.message


def test_checked_minors_are_those_of_checked_releases():
    assert [str(m) for m in vllm_compat.CHECKED_MINORS] == [
        "0.26", "0.27", "0.28", "0.29", "0.30", "0.31", "0.32", "0.33"]
    assert all(vllm_compat.checked(first) for first, _, _ in vllm_compat.CHECKED_RELEASES)
    assert vllm_compat.checked(Version("0.32.1")) == vllm_compat.checked(Version("0.32.0"))
    assert vllm_compat.checked(Version("0.25.1")) is None
    assert vllm_compat.checked(Version("0.34.0")) is None


def test_an_older_unchecked_minor_is_acted_on_only_when_asked_and_then_as_a_newer_one():
    verdict = vllm_compat.support_verdict("0.20.0", unchecked_allowed=True)
    assert verdict.act and verdict.check_contract
    assert "VLLM_KIMI_EAGLE_UNCHECKED_RELEASE lets it act" in verdict.message
    assert "0.26-0.33" in verdict.message and CONTRACT in verdict.message
    assert not vllm_compat.support_verdict("0.17.0", unchecked_allowed=True).act
    assert not vllm_compat.support_verdict(None, unchecked_allowed=True).act
    # Newer minors and checked ones do not depend on the switch.
    for reported in ("0.34.0", "dev", "0.32.1", "0.33.0rc1"):
        assert (vllm_compat.support_verdict(reported, unchecked_allowed=True)
                == vllm_compat.support_verdict(reported)), reported


@pytest.mark.parametrize(
    "text, release, base",
    [
        ("0.33.0", "0.33.0", "0.33.0"),
        ("0.32.0+cpu", "0.32.0+cpu", "0.32.0"),
        ("0.33.1.dev5+g1234abc", "0.33.1.dev5+g1234abc", "0.33.1"),
        ("0.34.0rc1", "0.34.0rc1", "0.34.0"),
        (" 0.32.0\n", "0.32.0", "0.32.0"),
        ("dev", None, None),
        ("0.0.0", None, None),
        ("0.0.1.dev3+gabc", None, None),
        ("", None, None),
        (None, None, None),
    ],
)
def test_version_strings_are_read_without_raising(text, release, base):
    assert vllm_compat.read_version(text) == (release and Version(release))
    assert vllm_compat.parse_version(text) == (base and Version(base))


@pytest.fixture
def fresh_version_cache():
    vllm_compat.installed_vllm_version_text.cache_clear()
    yield
    vllm_compat.installed_vllm_version_text.cache_clear()


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_the_installed_version_is_read_from_the_dist_metadata(fresh_version_cache):
    found = [v for v in map(_dist_version, vllm_compat.VLLM_DISTS) if v is not None]
    assert found, f"none of {vllm_compat.VLLM_DISTS} is installed"
    assert vllm_compat.installed_vllm_version_text() == found[0]
    assert vllm_compat.installed_vllm_version() == vllm_compat.parse_version(found[0])


@pytest.mark.parametrize("reported", ["dev", "0.32.0+cpu"])
def test_a_source_tree_without_metadata_is_read_from_vllm_version(
        monkeypatch, fresh_version_cache, reported):
    """A source checkout has no dist metadata; vLLM's version.py says "dev" where it cannot
    read its own version. Simulated: the metadata lookup finds no dist."""
    import vllm

    def no_dist(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_dist)
    monkeypatch.setattr(vllm, "__version__", reported)
    assert vllm_compat.installed_vllm_version_text() == reported
    assert vllm_compat.installed_vllm_version() == vllm_compat.read_version(reported)
    verdict = vllm_compat.support_verdict(vllm_compat.installed_vllm_version_text())
    assert verdict.act and verdict.check_contract is (reported == "dev")
