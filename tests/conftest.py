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


# The suite's order (`make test-order`): "collected" (the longest files first), "reverse",
# or "shuffle" (seeded); each shared engine runs its jobs in the same order
# (tests/helpers.py: ORDER_ENV).
ORDERS = ("collected", "reverse", "shuffle")


def pytest_addoption(parser):
    parser.addoption("--test-order", choices=ORDERS, default="collected",
                     help="run the tests, and each shared engine's jobs, in this order "
                          "(make test-order runs the suite reversed and shuffled)")
    parser.addoption("--test-order-seed", type=int, default=0,
                     help="the seed of --test-order shuffle")


def pytest_configure(config):
    """The account of engine and server starts (tools/engines/start_log.py) and the folder of
    shared engine results (helpers.shared_run): the controller names both before the
    workers start, so every worker and every child uses the same ones.

    Under pytest-xdist (make test runs two workers), each worker's engines ask vLLM for
    a core of their own (left to itself vLLM would give every engine core 0) and run one
    OpenMP thread. vLLM binds a server's worker process to its core, but an engine whose
    core runs in the caller's process (the tests' engines: VLLM_ENABLE_V1_MULTIPROCESSING=0)
    keeps one OpenMP thread per CPU, unbound: two such engines, one per pytest worker, then
    spin four threads on two cores and each runs 50 to 100 times slower
    (docs/measurements.md, "The test suite's time"). A binding or a thread count set by the
    caller or a test wins."""
    from vllm_kimi_eagle.tools.engines import start_log

    from tests.helpers import SHARED_RUNS_ENV

    from tests.helpers import ORDER_ENV

    order = config.getoption("test_order")
    if order != "collected":
        os.environ[ORDER_ENV] = f"{order}:{config.getoption('test_order_seed')}"
    if not hasattr(config, "workerinput"):
        if start_log.ENV not in os.environ:
            handle, path = tempfile.mkstemp(prefix="vllm-kimi-eagle-starts-", suffix=".jsonl")
            os.close(handle)
            os.environ[start_log.ENV] = path
        os.environ[SHARED_RUNS_ENV] = tempfile.mkdtemp(prefix="vllm-kimi-eagle-runs-")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw"):
        cores = sorted(os.sched_getaffinity(0))
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND",
                              str(cores[int(worker[2:]) % len(cores)]))
        os.environ.setdefault("OMP_NUM_THREADS", "1")


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


# The worker's own: pytest's, and the socket of its preloaded vLLM (tests/helpers.py),
# which stays for every later test once a test has started it.
KEPT = {"PYTEST_CURRENT_TEST", "VLLM_KIMI_EAGLE_PRELOADED"}


def _restore_environment(before: dict) -> None:
    for name in set(os.environ) - set(before) - KEPT:
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value and name not in KEPT:
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
    if run_restarts():
        terminalreporter.write_line("FAILED: a worker started the same configuration more "
                                    "than once (\"started N times\" above)", red=True)


def run_starts() -> list[dict]:
    """The run's engine and server starts (tools/engines/start_log.py)."""
    from vllm_kimi_eagle.tools.engines import start_log

    return start_log.read(os.environ.get(start_log.ENV, ""))


def starts_lines() -> list[str]:
    from vllm_kimi_eagle.tools.engines import start_log

    return start_log.account(run_starts())


def run_restarts() -> list:
    from vllm_kimi_eagle.tools.engines import start_log

    return start_log.restarted(run_starts())


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """A worker that started one configuration twice fails the run (the account names the
    tests): the suite's order is meant to hand each engine to every test that needs it."""
    if hasattr(session.config, "workerinput") or exitstatus != 0:
        return
    if run_restarts():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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


# The longest test files, longest first (their tests' seconds in a run's --durations or
# JUnit report). pytest-xdist's --dist loadfile hands out files in collection
# order (below), so these go first and the short files fill in behind them; ordered by
# their number of tests (pytest-xdist's default), one worker ended the run alone on the
# soak and the bench files.
LONGEST_FIRST = (
    "tests/e2e/test_evaluation_e2e.py",  # with SAME_WORKER's other files
    "tests/e2e/test_compiled.py",
    "tests/e2e/test_calibrate_e2e.py",
    "tests/e2e/test_k25_e2e.py",
    "tests/e2e/test_bench_e2e_run.py",
    "tests/e2e/test_soak_e2e.py",
    "tests/e2e/test_compare_e2e.py",
    "tests/e2e/test_lm_eval_offline_e2e.py",
    "tests/e2e/test_draft_e2e.py",
    "tests/e2e/test_trainer_exports_e2e.py",
    "tests/e2e/test_k3_drafts_e2e.py",
    "tests/e2e/test_greedy_shortcut_e2e.py",
    "tests/e2e/test_kimi_cost_e2e.py",
    "tests/e2e/test_scope_e2e.py",
)


# Files that use the e2e files' shared servers (tests/e2e/conftest.py): one worker runs
# them all, so the run starts the pair once.
SAME_WORKER = dict.fromkeys((
    "tests/e2e/test_evaluation_e2e.py",
    "tests/e2e/test_structured_outputs_e2e.py",
    "tests/e2e/test_vllm_server_e2e.py",
    "tests/e2e/test_running_server_e2e.py",
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
    from tests.helpers import ORDER_ENV, reordered

    order = longest_first([project_file(item) for item in items])
    items[:] = reordered([items[i] for i in order], os.environ.get(ORDER_ENV, ""))
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
