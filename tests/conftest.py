"""Fixtures every folder shares, and the gate of the tests marked ``engine``.

tests/unit: no engine, no server, no tiny-model build, no process started (no vLLM
config in a subprocess), no lm-eval task index: a maintainer's loop (make test-unit).
tests/integration: the tiny models on disk, create_engine_config() or the CLI in fresh
processes, forks, lm-eval's task index; no engine. tests/e2e: real vLLM engines and
servers, every test marked ``engine`` (markers: setup.cfg [tool:pytest]).
"""

import os
import tempfile
from collections import Counter

import pytest

from vllm_kimi_eagle.fixtures.cache import (
    build_summary,
    default_cache_dir,
    ensure_tiny_models,
    is_built,
)
from vllm_kimi_eagle.fixtures.k25 import write_k25_target
from vllm_kimi_eagle.fixtures.margins import summary_line

# Why the engine tests of this run must fail instead of running (see below).
ENGINE_FAILURE = pytest.StashKey[str]()
TINY_FOLDER = pytest.StashKey[str]()


def pytest_configure(config):
    """The account of engine and server starts (tools/engines/start_log.py) and the folder of
    shared engine results (helpers.shared_run): the controller names both before the
    workers start, so every worker and every child uses the same ones.

    Under pytest-xdist (make test runs two workers), each worker's engines ask vLLM for
    a core of their own; left to itself vLLM would give every engine core 0. (On the
    machines of this project the request does not pin the engine's thread either: both
    busy engines get both cores' mask, and the kernel spreads them over the two cores,
    which is what the suite's time needs; see bench-e2e's vllm_server.pin for a real
    pin.) A binding set by the caller or a test wins."""
    from vllm_kimi_eagle.tools.engines import start_log

    from tests.helpers import SHARED_RUNS_ENV

    if not hasattr(config, "workerinput"):
        if start_log.ENV not in os.environ:
            handle, path = tempfile.mkstemp(prefix="vllm-kimi-eagle-starts-", suffix=".jsonl")
            os.close(handle)
            os.environ[start_log.ENV] = path
        os.environ[SHARED_RUNS_ENV] = tempfile.mkdtemp(prefix="vllm-kimi-eagle-runs-")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cores = sorted(os.sched_getaffinity(0))
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[int(worker[2:]) % len(cores)])


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test leaves os.environ as it found it. vLLM sets variables in the process that
    builds its config (its CPU platform: LD_PRELOAD, the worker start method...) or imports
    some of its modules (AITER_SITUV2_A4W4); left in a pytest worker they would reach every
    later child, which then could not be forked from the preloaded vLLM
    (tests/preloaded_vllm.py) and would not start as a user's would."""
    before = dict(os.environ)
    yield
    _restore_environment(before)


@pytest.fixture(autouse=True, scope="module")
def _environment_restored_after_module():
    """The same for what a test module's own fixtures change: they are set up before any
    test's snapshot (a module that imports vLLM's model code in a fixture, for one)."""
    before = dict(os.environ)
    yield
    _restore_environment(before)


def _restore_environment(before: dict) -> None:
    for name in set(os.environ) - set(before) - {"PYTEST_CURRENT_TEST"}:
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value and name != "PYTEST_CURRENT_TEST":
            os.environ[name] = value


@pytest.fixture
def undo_vllm_changes():
    """What the test changes in vLLM (the plugin's installers, journaled by
    vllm_kimi_eagle/compat/patching.py) is undone when it ends. Every unit test has it;
    elsewhere a test that installs a mend in its own process asks for it."""
    from vllm_kimi_eagle.compat import patching

    start = patching.mark()
    yield
    patching.restore(since=start)


@pytest.fixture(scope="session")
def tiny(request):
    """The tiny Kimi models folder, built once (cached across sessions by builder version)."""
    folder = ensure_tiny_models()
    request.config.stash[TINY_FOLDER] = folder
    print(f"\n{tiny_models_line(folder)}")
    return folder


def tiny_models_line(folder: str) -> str:
    """Which build of the tiny models a run used: the content hash says whether two
    machines tested the same weights."""
    built = build_summary(folder)
    numerics = built.get("numerics", {})
    pinned = "pinned" if numerics.get("pinned") else f"NOT pinned ({numerics.get('not_pinned')})"
    return (f"tiny models: {folder}, builder v{built.get('builder_version')}, seed "
            f"{built.get('seed')}, content hash {built.get('content_hash')}, numerics {pinned} "
            f"(torch {numerics.get('torch')}, transformers {numerics.get('transformers')}, "
            f"built on {numerics.get('cpu', 'an unrecorded CPU')}); margins (acceptance a "
            f"draft served wrong loses): {summary_line(built.get('margins', {})) or 'none recorded'}")


def pytest_unconfigure(config):
    """The run's shared engine results go with the run."""
    from tests.helpers import SHARED_RUNS_ENV

    folder = os.environ.get(SHARED_RUNS_ENV)
    if folder and not hasattr(config, "workerinput"):
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def pytest_report_header(config):
    folder = default_cache_dir()
    return tiny_models_line(folder) if is_built(folder) else f"tiny models: not built yet ({folder})"


def pytest_terminal_summary(terminalreporter, config):
    folder = config.stash.get(TINY_FOLDER, None)
    if folder:
        terminalreporter.write_line(tiny_models_line(folder))
    for line in starts_lines() + skips_lines(terminalreporter.stats.get("skipped", [])):
        terminalreporter.write_line(line)


def starts_lines() -> list[str]:
    """Every engine and server start of the run: how many, their seconds, the ten
    longest, and any configuration started more than once."""
    from vllm_kimi_eagle.tools.engines import start_log

    starts = start_log.read(os.environ.get(start_log.ENV, ""))
    kinds = Counter(s["kind"] for s in starts)
    forked = sum(1 for s in starts if s.get("forked"))
    lines = [f"engine and server starts: {len(starts)} ({kinds['engine']} engines, {forked} "
             f"of them forked from a preloaded vLLM; {kinds['server']} servers), "
             f"{sum(s['seconds'] for s in starts):.0f} s in all"]
    for s in sorted(starts, key=lambda s: -s["seconds"])[:10]:
        lines.append(f"  {s['seconds']:7.1f} s  {s['kind']:6}  {s['test'] or '-'}  "
                     f"{s['label'][:120]}")
    again = Counter(s["identity"] for s in starts)
    for identity, count in sorted(again.items()):
        if count > 1:
            first = next(s for s in starts if s["identity"] == identity)
            lines.append(f"  started {count} times: {first['kind']} {first['label'][:200]}")
    return lines


def skips_lines(skipped) -> list[str]:
    """Skipped tests counted by reason: a skip is never silent."""
    reasons = Counter(report.longrepr[2] if isinstance(report.longrepr, tuple)
                      else str(report.longrepr) for report in skipped)
    lines = [f"skipped: {len(skipped)}"]
    lines += [f"  {count} x {reason.removeprefix('Skipped: ')[:200]}"
              for reason, count in reasons.most_common()]
    return lines


@pytest.fixture(scope="module")
def k25(tiny):
    """target-k25 in the tiny models folder (written from target/ if a cache built before
    it existed lacks it: it is derived data, a few seconds)."""
    folder = os.path.join(tiny, "target-k25")
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        write_k25_target(os.path.join(tiny, "target"), folder)
    return folder


# The longest test files, longest first (their engine and server seconds in the account
# at the end of a run). pytest-xdist's --dist loadfile hands out files in collection
# order (below), so these go first and the short files fill in behind them; ordered by
# their number of tests (pytest-xdist's default), one worker ended the run alone on the
# soak and the bench files.
LONGEST_FIRST = (
    "tests/e2e/test_compiled.py",
    "tests/e2e/test_bench_e2e_run.py",
    "tests/e2e/test_soak_e2e.py",
    "tests/e2e/test_evaluation_e2e.py",
    "tests/e2e/test_draft_e2e.py",
    "tests/e2e/test_calibrate_e2e.py",
    "tests/e2e/test_lm_eval_offline_e2e.py",
    "tests/e2e/test_compare_e2e.py",
    "tests/e2e/test_trainer_exports_e2e.py",
    "tests/e2e/test_k25_e2e.py",
    "tests/e2e/test_greedy_shortcut_e2e.py",
    "tests/e2e/test_scope_e2e.py",
    "tests/e2e/test_kimi_cost_e2e.py",
    "tests/e2e/test_k3_drafts_e2e.py",
)


# Files that use the e2e files' shared servers (tests/e2e/conftest.py): one worker runs
# them all, so the run starts the pair once.
SAME_WORKER = dict.fromkeys((
    "tests/e2e/test_evaluation_e2e.py",
    "tests/e2e/test_structured_outputs_e2e.py",
    "tests/e2e/test_vllm_server_e2e.py",
), "the e2e files' shared servers")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile (make test) as pytest-xdist does it, but with SAME_WORKER's files as
    one unit of work, and the files in collection order (LONGEST_FIRST), not reordered by
    their number of tests."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SAME_WORKER.get(path, path)

    config.option.loadscopereorder = False
    return Scheduling(config, log)


def project_file(item) -> str:
    """A test item's file, relative to the project (as LONGEST_FIRST and SAME_WORKER name it)."""
    return os.path.relpath(str(item.path), str(item.config.rootpath))


def longest_first(paths: list[str]) -> list[int]:
    """The order to run items in, given each item's file path (relative to the project):
    LONGEST_FIRST's files in its order, then the rest as collected."""
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    return sorted(range(len(paths)), key=lambda i: rank.get(paths[i], len(rank)))


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: judge only what will run
def pytest_collection_modifyitems(config, items):
    """Tests marked ``engine`` start vLLM engines with MLA models: they skip on a release
    that cannot start one, and FAIL on a release where the engine tests are the proof
    (vllm_compat.E2E_TESTED), so that CI never goes green on a skip there
    (helpers.engine_test_action decides). Then the longest files go first (above)."""
    order = longest_first([project_file(item) for item in items])
    items[:] = [items[i] for i in order]
    marked = [item for item in items if item.get_closest_marker("engine")]
    if not marked:
        return
    from tests.helpers import cpu_mla_engine_problem, engine_test_action
    from vllm_kimi_eagle.compat import vllm_compat

    problem = cpu_mla_engine_problem()
    action = engine_test_action(problem, vllm_compat.installed_vllm_version(),
                                vllm_compat.E2E_TESTED)
    for item in marked:
        if action == "skip":
            item.add_marker(pytest.mark.skip(reason=problem or ""))
        elif action == "fail":
            item.stash[ENGINE_FAILURE] = (
                f"engine tests must run on this release, but: {problem}")


def pytest_runtest_setup(item):
    """Fails an engine test before its fixtures start anything (see above)."""
    failure = item.stash.get(ENGINE_FAILURE, None)
    if failure is not None:
        pytest.fail(failure)
