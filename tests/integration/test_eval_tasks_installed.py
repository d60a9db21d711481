"""The lm-eval tasks have one source, eval/tasks; a wheel carries a copy the build makes,
so `vllm-kimi-eagle eval --task kimi_eagle_gpqa_tiny` works from a pip install with no
checkout."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys

from tests.helpers import BASE_ENV, REPO

NOT_SOURCES = (".git", ".venv*", "out", "build", "*.egg-info", "mutants", ".hypothesis",
               ".pytest_cache", "__pycache__", ".gpu", ".whl")

INSTALLED_TASK = """
import json, os
import vllm_kimi_eagle
from lm_eval.tasks import TaskManager
from vllm_kimi_eagle.tools.evaluation.tasks import TINY_TASK, task_folder, tiny_data
folder = task_folder()
tiny = TaskManager(include_path=folder).load([TINY_TASK])["tasks"][TINY_TASK]
print(json.dumps({"package": vllm_kimi_eagle.__file__, "folder": folder,
                  "data": tiny_data(), "docs": len(list(tiny.validation_docs()))}))
"""


def test_a_wheel_carries_the_tasks_built_from_eval_tasks(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", str(source), "-w", str(tmp_path / "wheel")],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "wheel").iterdir()
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(wheel)], check=True, capture_output=True,
                   timeout=300)
    copy = site / "vllm_kimi_eagle" / "eval_tasks"
    compared = filecmp.dircmp(os.path.join(REPO, "eval", "tasks"), copy,
                              ignore=["__pycache__"])
    assert not (compared.left_only or compared.right_only or compared.diff_files)
    assert not any(sub.left_only or sub.right_only or sub.diff_files
                   for sub in compared.subdirs.values())

    # Elsewhere than the checkout, the installed package is the one imported.
    env = {**os.environ, **BASE_ENV, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", INSTALLED_TASK], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["package"].startswith(str(site)), found
    assert found["folder"] == str(copy)
    assert found["data"].startswith(str(copy)) and found["docs"] == 12
