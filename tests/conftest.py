"""Suite-wide fixtures: the tiny default model, built once (offline, deterministic)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from models.tiny_qwen2_vl import DEFAULT_DIR, build

    return build(DEFAULT_DIR)
