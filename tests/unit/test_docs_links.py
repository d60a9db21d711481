"""Every link between the README and the pages of docs/ leads somewhere: the file exists,
and a ``#section`` names a heading of that page as GitHub numbers them. A section moved
or renamed fails here before a reader follows a dead link."""

from __future__ import annotations

import os
import re

import pytest

from tests.helpers import REPO, doc_pages

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped
    (hyphens and underscores kept), spaces turned into hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def prose(path: str) -> str:
    """A page's text outside its code blocks."""
    with open(path) as f:
        return re.sub(r"```.*?```", "", f.read(), flags=re.S)


def anchors(path: str) -> set[str]:
    """The anchors of a page's headings (outside code blocks), repeats numbered as GitHub
    numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path).splitlines():
        match = HEADING.match(line)
        if match:
            anchor = github_anchor(match.group(1))
            count = seen.get(anchor, 0)
            found.add(anchor if count == 0 else f"{anchor}-{count}")
            seen[anchor] = count + 1
    return found


def local_links(path: str) -> list[str]:
    return [link for link in LINK.findall(prose(path)) if not re.match(r"[a-z]+:", link)]


LINKS = [(os.path.relpath(page, REPO), link) for page in doc_pages()
         for link in local_links(page)]


def test_the_docs_link_to_each_other():
    assert len(LINKS) >= 20, LINKS


def test_github_anchor():
    assert github_anchor("Why `eval`'s two speed figures once disagreed (historical)") == \
        "why-evals-two-speed-figures-once-disagreed-historical"
    assert github_anchor("GPU: one H100 (historical, builder v5)") == \
        "gpu-one-h100-historical-builder-v5"


@pytest.mark.parametrize("page,link", LINKS, ids=[f"{p}:{l}" for p, l in LINKS])
def test_every_link_leads_somewhere(page, link):
    target, _, anchor = link.partition("#")
    path = os.path.normpath(os.path.join(REPO, os.path.dirname(page), target)) if target \
        else os.path.join(REPO, page)
    assert os.path.exists(path), f"{page}: link {link} names no file ({path})"
    if anchor:
        assert path.endswith(".md"), f"{page}: link {link}: an anchor in a file that is not Markdown"
        assert anchor in anchors(path), \
            f"{page}: link {link}: no such section in {target or page}; sections: {sorted(anchors(path))}"
