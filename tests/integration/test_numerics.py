"""The build's pinned numerics: denormals flushed on every thread that trains."""

import json
import subprocess
import sys

from vllm_kimi_eagle.fixtures.numerics import pinned_environment

# A denormal times one, on a tensor large enough that ATen splits it across threads: each
# thread that computes a part must flush, or its part keeps the denormal.
CHILD = """
import json, torch
from vllm_kimi_eagle.fixtures.numerics import pin_in_process
record = pin_in_process()
x = torch.full((1 << 20,), 1e-40, dtype=torch.float32)
print(json.dumps({"record": record, "nonzero": int((x * 1.0).count_nonzero())}))
"""


def test_the_build_flushes_denormals_on_every_thread():
    done = subprocess.run([sys.executable, "-c", CHILD], env=pinned_environment(),
                          capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["record"]["denormals_flushed"] is True
    assert found["record"]["threads"] == 2
    assert found["nonzero"] == 0, f"{found['nonzero']} of {1 << 20} denormals kept"
