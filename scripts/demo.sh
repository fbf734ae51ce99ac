#!/usr/bin/env bash
# The main job on the built-in default: the tiny Qwen2-VL on the real vLLM engine (CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m edgeserve.demo
