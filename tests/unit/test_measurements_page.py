"""docs/measurements.md holds the current build's evidence: the build it names is the one
the code builds, and it stays one page a reader takes in. Earlier builds' figures live in
docs/measurements-archive.md, each under a heading that names its build or its date."""

from __future__ import annotations

import os
import re

from tests.helpers import REPO
from tests.unit.test_docs_links import prose
from vllm_kimi_eagle.fixtures.cache import BUILDER_VERSION

PAGE = os.path.join(REPO, "docs", "measurements.md")
ARCHIVE = os.path.join(REPO, "docs", "measurements-archive.md")
MOST_LINES = 400
BUILD_NAMED = re.compile(r"\b(?:builder v|tiny-v|builder version )(\d+)\b")
# Builds whose weights the current one makes bit for bit (the same content hash, the page
# says where it was seen): their figures are of these weights. v17 renamed the margins.
SAME_WEIGHTS = {16}


def named_builds(text: str) -> set[int]:
    """The builder versions a text names in its words (link targets left out)."""
    words = re.sub(r"\]\([^)]*\)", "]", text)
    return {int(n) for n in BUILD_NAMED.findall(words)}


def test_named_builds():
    assert named_builds("builder v16, `tiny-v15` and [x](a.md#builder-v9)") == {15, 16}


def test_the_page_names_the_build_the_code_builds_and_no_other():
    named = named_builds(prose(PAGE))
    assert BUILDER_VERSION in named and named <= {BUILDER_VERSION} | SAME_WEIGHTS, (
        f"docs/measurements.md names builds {sorted(named)}; the code builds "
        f"v{BUILDER_VERSION} (fixtures/cache.py BUILDER_VERSION), with the weights of "
        f"{sorted(SAME_WEIGHTS) or 'no other'}. Move figures of other builds to "
        "docs/measurements-archive.md, or measure them again on this build.")


def test_the_page_says_which_build_is_current():
    with open(PAGE) as f:
        text = f.read()
    assert f"The current build is **builder v{BUILDER_VERSION}**" in text


def test_the_page_fits_an_afternoon():
    with open(PAGE) as f:
        lines = f.read().count("\n")
    assert lines <= MOST_LINES, (
        f"docs/measurements.md has {lines} lines, more than {MOST_LINES}: move what no "
        "longer holds for the current build to docs/measurements-archive.md")


def test_each_archived_section_names_its_build_or_date():
    sections = re.split(r"(?m)^## ", prose(ARCHIVE))[1:]
    assert sections
    undated = [s.split("\n", 1)[0] for s in sections
               if not (named_builds(s) or re.search(r"20\d\d-\d\d-\d\d", s))]
    assert not undated, undated
