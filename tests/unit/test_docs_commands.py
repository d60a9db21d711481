"""Every ``vllm-kimi-eagle ...`` command shown in the README and docs/ parses with the
CLI's own parser, so a renamed or removed flag fails here before a user copies it."""

from __future__ import annotations

import os
import re
import shlex

import pytest

from tests.helpers import REPO, doc_pages
from vllm_kimi_eagle.tools import cli

DOCS = doc_pages()
PROGRAM = re.compile(r"(?:^|[\s(])(?:[\w./-]*/)?vllm-kimi-eagle\s+(?=[a-z-])")
# Where a shell command line stops being arguments of the program.
SHELL_STOPS = {"|", ">", ">>", "2>&1", "&&", "||", ";", "&"}


def shown_commands(text: str) -> list[str]:
    """The command lines of a Markdown text: in code blocks (continuations joined) and in
    inline code spans, from ``vllm-kimi-eagle`` on."""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            match = PROGRAM.search(line)
            if match and not line.lstrip().startswith("#"):
                found.append(line[match.end():])
    outside = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`\n]+)`", outside):
        match = PROGRAM.search(span)
        if match:
            found.append(span[match.end():])
    return found


def argv_of(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    stop = next((i for i, word in enumerate(words) if word in SHELL_STOPS), len(words))
    return words[:stop]


COMMAND_NAMES = set(cli.TOOL_MODULES) | set(
    cli.build_parser()._subparsers._group_actions[0].choices)
COMMANDS = [(os.path.relpath(path, REPO), command) for path in DOCS
            for command in shown_commands(open(path).read())]


def test_the_docs_show_commands():
    pages = {page for page, _ in COMMANDS}
    assert "README.md" in pages and len(COMMANDS) >= 10, COMMANDS


@pytest.mark.parametrize("page,command", COMMANDS,
                         ids=[f"{page}:{command[:40]}" for page, command in COMMANDS])
def test_every_shown_command_parses(page, command):
    argv = argv_of(command)
    if len(argv) == 1:  # a command named in prose, e.g. `vllm-kimi-eagle eval`
        assert argv[0] in COMMAND_NAMES, f"{page}: no command `vllm-kimi-eagle {argv[0]}`"
        return
    try:
        cli.parse(argv)
    except SystemExit as exit_:
        assert exit_.code in (0, None), f"{page}: `vllm-kimi-eagle {command}` does not parse"


def test_a_renamed_flag_would_fail():
    with pytest.raises(SystemExit) as exit_:
        cli.parse(argv_of("inspect DRAFT --targett TARGET"))
    assert exit_.value.code == 2
