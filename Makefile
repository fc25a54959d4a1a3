# The two set-up commands: `make study` runs the default study, `make test` runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: study test test-fast test-gpu-build lint install install-gpu

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The GPU install: exactly one ONNX Runtime, onnxruntime-gpu, beside the CUDA 13 torch of
# constraints.txt. Both ORT builds ship the `onnxruntime` package, and the base dependencies bring
# the CPU one, so both are removed after the install and the GPU build is put back on its own.
# `make install-gpu GPU_EXTRAS=dev,gpu,tensorrt` adds TensorRT, whose libraries NVIDIA publishes
# on its own index (PyPI's tensorrt-cu13-libs is a placeholder that fetches from there). The index
# is added only then: pip asks every index for every package, and retries one it cannot reach.
GPU_EXTRAS ?= dev,gpu
GPU_INDEX = $(if $(findstring tensorrt,$(GPU_EXTRAS)),--extra-index-url https://pypi.nvidia.com)
install-gpu: $(STAMP)
	$(BIN)/pip install -q $(GPU_INDEX) -c constraints.txt -c constraints-gpu.txt -e '.[$(GPU_EXTRAS)]'
	$(BIN)/pip uninstall -q -y onnxruntime onnxruntime-gpu
	$(BIN)/pip install -q -c constraints.txt -c constraints-gpu.txt --no-deps onnxruntime-gpu
	$(BIN)/python -c "from automl.catalog.runtimes._ort_packages import require_single_ort as r; r()"

study: $(STAMP)
	$(BIN)/automl study start studies/digits.yaml

# Tests run in TEST_WORKERS processes (pytest-xdist): the two cores of the CI machine by default;
# a module marked with an xdist_group runs whole in one of them.
TEST_WORKERS ?= 2

# The tests start many automl processes. Where PYTHONDONTWRITEBYTECODE is set (as on the CI
# machine), each would compile automl again: compile it once, for the files that changed.
BYTECODE = $(BIN)/python -m compileall -q automl api

test: $(STAMP)
	bash .ci/chromium.sh
	$(BIN)/ruff check .
	$(BYTECODE)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup

# Unit and contract tests only, for a quick check while working (docs/contributing.md); CI runs
# `make test`. The report's browser test is one of them, so Chromium is installed here too.
test-fast: $(STAMP)
	bash .ci/chromium.sh
	$(BIN)/ruff check .
	$(BYTECODE)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow and not e2e" --durations=10

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The unit and contract tests under onnxruntime-gpu, in a venv of its own (.venv-gpu, about 4 GB
# of NVIDIA wheels). They pass on a host without a GPU, where that build lists GPU providers
# that cannot start (docs/gpu.md).
test-gpu-build:
	$(MAKE) install-gpu VENV=.venv-gpu
	bash .ci/chromium.sh
	.venv-gpu/bin/pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow and not e2e"
