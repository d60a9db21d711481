"""The suite's order (tests/conftest.py: the longest files first, each named file still
there; --test-order)."""

import os

from tests.conftest import LONGEST_FIRST, SAME_WORKER, longest_first
from tests.helpers import REPO


def test_every_named_file_exists():
    missing = [p for p in (*LONGEST_FIRST, *SAME_WORKER)
               if not os.path.exists(os.path.join(REPO, p))]
    assert not missing, f"renamed or removed: {missing}; update LONGEST_FIRST / SAME_WORKER"


def test_named_files_first_in_their_order_the_rest_as_collected():
    paths = ["tests/unit/a.py", LONGEST_FIRST[1], "tests/e2e/b.py", LONGEST_FIRST[0],
             LONGEST_FIRST[1]]
    assert [paths[i] for i in longest_first(paths)] == [
        LONGEST_FIRST[0], LONGEST_FIRST[1], LONGEST_FIRST[1], "tests/unit/a.py",
        "tests/e2e/b.py"]


def test_the_test_order_reverses_or_shuffles_the_same_way_every_time():
    from tests.helpers import reordered

    things = list(range(10))
    assert reordered(things, "") == things and reordered(things, "reverse:0") == things[::-1]
    shuffled = reordered(things, "shuffle:3")
    assert sorted(shuffled) == things and shuffled != things
    assert reordered(things, "shuffle:3") == shuffled != reordered(things, "shuffle:4")
