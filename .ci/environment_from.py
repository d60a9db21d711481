"""Start a virtual environment from another one's packages, hard-linked.

    python3 .ci/environment_from.py SOURCE_VENV NEW_VENV
    NEW_VENV/bin/python .ci/environment_from.py --prune REQUIREMENT...

CI's two vLLM releases need environments that differ in a few packages; a second full
copy would take about 4 GiB more disk. NEW_VENV gets SOURCE_VENV's site-packages as hard
links and its console scripts rewritten for NEW_VENV's Python; pip then installs only
what differs (the Makefile's ``DEPS_FROM``). pip replaces a file by writing a new one and
never writes into an installed file, so neither environment changes the other's files.

``--prune``, run by the environment's own Python once pip has installed the requirements
(eager upgrades), uninstalls every distribution none of them needs, their dependencies'
dependencies and extras followed: what the source had that a fresh install of the same
requirements would not (the newer vLLM's own dependencies). The environment then holds
what a fresh one resolves to.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile


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


# What a fresh venv holds before any requirement is installed.
BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})


def needed(requested: list[str], requires: dict[str, list[str]]) -> set[str]:
    """The distributions (normalised names) ``requested`` needs, given each installed
    distribution's declared requirements (``requires``: name -> Requires-Dist lines): its
    dependencies, theirs, and the extras asked for on the way, markers evaluated here."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: set[str] = set()
    seen: set[tuple[str, frozenset]] = set()
    todo = [Requirement(text) for text in requested]
    while todo:
        requirement = todo.pop()
        name, extras = canonicalize_name(requirement.name), frozenset(requirement.extras)
        if (name, extras) in seen or name not in requires:
            continue
        seen.add((name, extras))
        found.add(name)
        for line in requires[name]:
            dependency = Requirement(line)
            marker = dependency.marker
            if marker is None or any(marker.evaluate({"extra": extra})
                                     for extra in (extras or {""})):
                todo.append(dependency)
    return found


def prune(requested: list[str]) -> list[str]:
    """Uninstall, from this interpreter's environment, what ``requested`` does not need;
    the names uninstalled."""
    import importlib.metadata

    from packaging.utils import canonicalize_name

    dists = {canonicalize_name(d.metadata["Name"]): d
             for d in importlib.metadata.distributions()}
    installed = {name: list(d.requires or []) for name, d in dists.items()}
    extra = sorted(set(installed) - needed(requested, installed) - BOOTSTRAP)
    if not extra:
        return extra
    kept = set().union(*(_files(d) for name, d in dists.items() if name not in extra))
    shared = sorted(path for name in extra for path in _files(dists[name]) & kept
                    if os.path.isfile(path))
    # pip uninstalls every file a distribution's RECORD lists, also those a kept one
    # installed over it (oss-harmony and openai-harmony both write openai_harmony/): such
    # files are kept aside as hard links and put back.
    with tempfile.TemporaryDirectory(dir=sys.prefix) as aside:
        for number, path in enumerate(shared):
            os.link(path, os.path.join(aside, str(number)))
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", *extra],
                       check=True)
        for number, path in enumerate(shared):
            if not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.link(os.path.join(aside, str(number)), path)
    return extra


def _files(dist) -> set[str]:
    """The paths a distribution's RECORD lists, absolute."""
    return {os.path.normpath(str(dist.locate_file(file))) for file in dist.files or []}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--prune"]:
        removed = prune(argv[1:])
        print(f"{sys.prefix}: uninstalled what a fresh install of the requirements would not "
              f"hold: {', '.join(removed) or 'nothing'}")
        return 0
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
