"""tests/conftest.py's run order: the longest files first, each named file still there."""

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
