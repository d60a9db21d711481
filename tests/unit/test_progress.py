"""Progress where the output is not a terminal: a line every few percent, not one per
update (a tiny-model build made 1183 lines before)."""

from __future__ import annotations

import io

from vllm_kimi_eagle.tools.figures import progress


def test_a_pipe_gets_a_line_every_five_percent_and_one_at_the_end():
    out = io.StringIO()
    bar = progress.bar(1183, "tiny Kimi models", "step", stream=out)
    for step in range(1183):
        bar.update(1)
        if step == 600:
            bar.set_postfix(stage="draft", loss="1.234")
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 20 and "\r" not in out.getvalue()
    assert lines[0].startswith("tiny Kimi models: 5% (60/1183 steps, ")
    assert "left)" in lines[0] and lines[-1].startswith("tiny Kimi models: 100% (1183/1183")
    assert lines[-1].endswith(" stage=draft, loss=1.234")


def test_an_unfinished_run_still_ends_with_a_line_and_a_disabled_bar_says_nothing():
    out = io.StringIO()
    bar = progress.bar(10, "windows", "window", stream=out)
    bar.update(3)
    bar.write("a message")
    bar.close()
    lines = out.getvalue().splitlines()
    # The update's line (one step of three windows), the message, and at the close the
    # line where the run stopped, not at 100%.
    assert len(lines) == 3 and lines[1] == "a message"
    assert lines[0].startswith("windows: 30% (3/10 windows, ") and "left)" in lines[0]
    assert lines[2].startswith("windows: 30% (3/10 windows, ")
    quiet = io.StringIO()
    silent = progress.bar(10, "x", "step", enabled=False, stream=quiet)
    silent.update(10)
    silent.close()
    assert quiet.getvalue() == ""


def test_a_terminal_gets_tqdms_bar_in_place():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    drawn = progress.bar(5, "x", "step", stream=Terminal())
    assert type(drawn).__module__.startswith("tqdm")
    drawn.close()


def test_the_line_form_has_every_tqdm_method_the_tools_call():
    """Each attribute the tools use on a bar (grep of tools/ and fixtures/), on both forms:
    a missing one fails only where the output is not a terminal, as in CI."""
    import re
    from pathlib import Path

    package = Path(progress.__file__).parents[2]  # vllm_kimi_eagle/
    used = set()
    for path in package.rglob("*.py"):
        used |= set(re.findall(r"\b(?:bar|progress)\.(\w+)", path.read_text()))
    used -= {"bar", "say", "EVERY", "LineProgress"}  # the module's own names
    line = progress.bar(10, "x", "step", stream=io.StringIO())
    assert used and all(hasattr(line, name) for name in used), sorted(
        n for n in used if not hasattr(line, n))
