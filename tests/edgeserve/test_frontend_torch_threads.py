"""The frontend's torch intra-op threads: one by default, the process's own count while vLLM
starts its EngineCore, and the same image-processor output whatever the count."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeserve import engine


@pytest.fixture
def torch_threads() -> Iterator[int]:
    """torch's count before the test (at least 2, so that one thread is a change); restored
    after it, together with the module's memory of it."""
    before, remembered = torch.get_num_threads(), list(engine._PROCESS_TORCH_THREADS)
    engine._PROCESS_TORCH_THREADS.clear()
    torch.set_num_threads(max(2, before))
    yield torch.get_num_threads()
    torch.set_num_threads(before)
    engine._PROCESS_TORCH_THREADS[:] = remembered


def test_the_frontend_count_holds_except_while_vllm_starts_its_processes(torch_threads: int) -> None:
    engine.set_frontend_torch_threads(1)
    assert torch.get_num_threads() == 1
    with engine._process_torch_threads():
        assert torch.get_num_threads() == torch_threads
    assert torch.get_num_threads() == 1
    engine.set_frontend_torch_threads(1)  # a restarted engine: torch's own count is not forgotten
    with engine._process_torch_threads():
        assert torch.get_num_threads() == torch_threads


def test_vllms_image_processor_gives_the_same_pixel_values_on_one_thread(
    torch_threads: int, tiny_model_dir: Path
) -> None:
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(tiny_model_dir)
    # a ready-sized image, as the workers hand it over (47 x 27 patches of 28 pixels)
    pixels = np.random.default_rng(3).integers(0, 256, (27 * 28, 47 * 28, 3), dtype=np.uint8)
    size = {"shortest_edge": 3136, "longest_edge": 1_003_520}
    many = processor(images=[pixels], size=size, return_tensors="pt")["pixel_values"]
    engine.set_frontend_torch_threads(1)
    one = processor(images=[pixels], size=size, return_tensors="pt")["pixel_values"]
    assert torch.get_num_threads() == 1 and one.shape == (27 * 47 * 4, 3 * 2 * 14 * 14)
    assert torch.equal(one, many)
