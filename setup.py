import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

# The lm-eval tasks live in eval/tasks, their one source; a wheel carries a copy as
# vllm_kimi_eagle/eval_tasks (tools/evaluation/tasks.py looks in both places).
TASKS = os.path.join("eval", "tasks")


class BuildWithTasks(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads eval/tasks
            return
        copy = os.path.join(self.build_lib, "vllm_kimi_eagle", "eval_tasks")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(TASKS, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithTasks})
