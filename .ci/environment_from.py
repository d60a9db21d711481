"""Start a virtual environment from another one's packages, hard-linked.

    python3 .ci/environment_from.py SOURCE_VENV NEW_VENV

CI's two vLLM releases need environments that differ in a few packages; a second full
copy would take about 4 GiB more disk. NEW_VENV gets SOURCE_VENV's site-packages as hard
links and its console scripts rewritten for NEW_VENV's Python; pip then installs only
what differs (the Makefile's ``DEPS_FROM``). pip replaces a file by writing a new one and
never writes into an installed file, so neither environment changes the other's files.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys


def _site_packages(venv: str) -> str:
    found = glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))
    if len(found) != 1:
        raise SystemExit(f"{venv}: expected one lib/python*/site-packages, found {found}")
    return found[0]


def _link_tree(source: str, dest: str) -> int:
    count = 0
    for root, dirs, files in os.walk(source):
        into = os.path.join(dest, os.path.relpath(root, source))
        os.makedirs(into, exist_ok=True)
        for name in files:
            os.link(os.path.join(root, name), os.path.join(into, name),
                    follow_symlinks=False)
            count += 1
    return count


def _copy_scripts(source: str, dest: str) -> int:
    """SOURCE's console scripts (files whose first line runs SOURCE's Python), each
    rewritten to run DEST's."""
    old = f"#!{os.path.abspath(source)}/bin/python".encode()
    new = f"#!{os.path.abspath(dest)}/bin/python".encode()
    count = 0
    for name in sorted(os.listdir(os.path.join(source, "bin"))):
        path = os.path.join(source, "bin", name)
        target = os.path.join(dest, "bin", name)
        if os.path.islink(path) or not os.path.isfile(path) or os.path.exists(target):
            continue
        with open(path, "rb") as f:
            text = f.read()
        if not text.startswith(old):
            continue
        with open(target, "wb") as f:
            f.write(new + text[len(old):])
        os.chmod(target, os.stat(path).st_mode)
        count += 1
    return count


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    source, dest = argv
    if not os.path.isfile(os.path.join(source, "pyvenv.cfg")):
        raise SystemExit(f"{source} is not a virtual environment (no pyvenv.cfg); build it "
                         "first (make deps)")
    if os.path.exists(dest):
        raise SystemExit(f"{dest} exists already; remove it or leave DEPS_FROM unset")
    try:  # a half-made environment would pass for a made one: none is left
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", dest], check=True)
        source_sp, dest_sp = _site_packages(source), _site_packages(dest)
        if os.path.basename(os.path.dirname(source_sp)) != \
                os.path.basename(os.path.dirname(dest_sp)):
            raise SystemExit(f"{source} is {os.path.dirname(source_sp)}, {dest} would be "
                             f"{os.path.dirname(dest_sp)}: the same Python must build both")
        files = _link_tree(source_sp, dest_sp)
        scripts = _copy_scripts(source, dest)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    print(f"{dest}: {files} files hard-linked from {source_sp}, {scripts} console scripts")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
