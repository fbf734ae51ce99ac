# Two commands for a fresh machine (Python 3.11, no GPU):
#   make        set everything up, then run the main job on the built-in tiny model
#   make test   set everything up if needed, then lint, type-check and run the test suite
VENV   ?= .venv
PY     := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export VLLM_NO_USAGE_STATS := 1
export DO_NOT_TRACK := 1

.PHONY: all setup sim-native model demo test lint typecheck pytest
all: demo

setup:
	@scripts/install.sh
	@$(MAKE) --no-print-directory sim-native

# The simulator's event path compiled with mypyc into build/sim-native/ (skipped when fresh; used
# only while sim/ is unchanged since the build, see sim/native.py). A failed build is not fatal:
# the simulator then runs as pure Python.
sim-native:
	@EDGESERVE_SIM_PURE=1 $(PY) -c 'import sim.native as n; n.main()' build \
		|| echo "[sim-native] WARNING: compiling the simulator failed; it runs as pure Python"

model: setup
	@$(VENV)/bin/edgeserve models build-tiny

demo: model
	@scripts/demo.sh

lint: setup
	$(VENV)/bin/ruff check .

typecheck: setup
	$(VENV)/bin/mypy

pytest: model
	$(VENV)/bin/pytest -q -p no:cacheprovider

test: lint typecheck pytest
