"""Whether a process's environment pins the numerics torch reads when it starts (what
`python -m vllm_kimi_eagle.fixtures.build` checks before it starts again, pinned)."""

from vllm_kimi_eagle.fixtures import numerics


def test_a_pinned_environment_is_pinned_whatever_the_caller_set():
    assert numerics.environment_pinned(numerics.pinned_environment({}))
    caller = {"MKL_CBWR": "AUTO", "ATEN_CPU_CAPABILITY": "avx512", "PATH": "/bin"}
    pinned = numerics.pinned_environment(caller)
    assert numerics.environment_pinned(pinned) and pinned["PATH"] == "/bin"


def test_an_environment_missing_or_changing_a_pin_is_not_pinned():
    assert not numerics.environment_pinned({})
    for name in ("ATEN_CPU_CAPABILITY", "MKL_CBWR"):
        changed = dict(numerics.pinned_environment({}), **{name: "other"})
        assert not numerics.environment_pinned(changed), name
    # The thread counts are set in the process (numerics.pin_in_process), not read at start.
    threads = dict(numerics.pinned_environment({}), OMP_NUM_THREADS="7")
    assert numerics.environment_pinned(threads)
