"""The planted faults (tests/planted_faults.py, `make faults`) still fit the code: each
one's text occurs once in its file, and planting it changes that file."""

import os

import pytest

from tests.helpers import REPO
from tests.planted_faults import (
    CONTROL,
    FAULTS,
    apply,
    copy_checkout,
    failed_tests,
    junit_cases,
    verdict,
)


def test_fault_names_are_unique():
    assert len({f.name for f in FAULTS}) == len(FAULTS)


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_each_fault_plants_once_in_a_copy(fault, tmp_path):
    folder = tmp_path / "tree"
    folder.mkdir()
    target = folder / fault.path
    target.parent.mkdir(parents=True)
    original = open(os.path.join(REPO, fault.path)).read()
    target.write_text(original)
    apply(fault, str(folder))
    planted = target.read_text()
    assert planted != original and all(new in planted for _, new in fault.edits)
    with pytest.raises(SystemExit, match="not once"):
        apply(fault, str(folder))  # the original text is gone now


def test_the_copy_leaves_out_git_and_environments(tmp_path):
    source = tmp_path / "src"
    for name in (".git/HEAD", ".venv/bin/python", ".venv-0.28.0/x", "pkg/a.py", "out/r.json"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text("x")
    dest = copy_checkout(str(source), str(tmp_path / "dest"))
    found = sorted(os.path.relpath(os.path.join(d, f), dest)
                   for d, _, files in os.walk(dest) for f in files)
    assert found == ["pkg/a.py"]


def test_failed_tests_are_read_from_junit(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite><testcase classname="tests.e2e.test_a" name="test_x[d]">'
        '<failure message="m"/></testcase><testcase classname="tests.unit.test_b" '
        'name="test_y"/><testcase classname="tests.unit.test_b" name="test_z"><error/>'
        '</testcase></testsuite></testsuites>')
    assert failed_tests(str(report)) == ["tests/e2e/test_a.py::test_x[d]",
                                         "tests/unit/test_b.py::test_z"]
    assert failed_tests(str(tmp_path / "missing.xml")) == []


def test_a_fault_is_caught_only_where_a_test_failed_on_it(tmp_path):
    """A run that exits non-zero with no failed test (a collection error, a timeout, the
    restart rule) catches nothing; the control must run tests and pass them."""
    fault = {"name": FAULTS[0].name, "exit": 1, "ran": 0, "failed": []}
    assert verdict(fault) == "MISSED (exit 1, no test failed)"
    assert verdict({**fault, "exit": 0, "ran": 5}) == "MISSED"
    assert verdict({**fault, "failed": ["tests/unit/test_a.py::test_x"]}) == "caught"
    control = {"name": CONTROL.name, "exit": 0, "ran": 0, "failed": []}
    assert verdict(control) == "RED (control)"  # nothing ran
    assert verdict({**control, "ran": 3}) == "green"
    assert verdict({**control, "ran": 3, "exit": 1}) == "RED (control)"
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite><testcase classname="" name="tests.unit.test_a"><error '
        'message="collection failure">ImportError</error></testcase><testcase '
        'classname="tests.unit.test_b" name="test_y"/></testsuite></testsuites>')
    assert junit_cases(str(report)) == (1, [])
