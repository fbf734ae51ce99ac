"""The preprocessing pool with real worker processes and real shared memory.

Specification: a job comes back as the exact ``mm_preproc`` result for its bytes, through a
shared-memory segment; bad images fail as BAD_IMAGE while the pool keeps serving; a worker killed
mid-job is replaced and its job is run once more, by another worker or the replacement, and
succeeds; a job whose worker is killed on both attempts fails (WORKER_DIED, with both signals)
and the pool serves the next one; a full queue refuses (PoolFull); and no ``edgeserve_<pid>_*``
segment outlives its job on any of these paths.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data as photos

import mm_preproc
from edgeserve.preproc_pool import shm
from edgeserve.preproc_pool.messages import ErrorKind, PreprocParams, SourceKind
from edgeserve.preproc_pool.pool import ImageInput, PoolFull, PreprocFailed, PreprocPool

PARAMS = PreprocParams(min_pixels=3136, max_pixels=200_704, max_image_pixels=30_000_000,
                       max_image_bytes=64 << 20)
# full-size decoding, so that a big photo keeps a worker busy for a few hundred milliseconds
SLOW = PreprocParams(min_pixels=3136, max_pixels=200_704, max_image_pixels=30_000_000,
                     max_image_bytes=64 << 20, fast_decode=False)


def jpeg(array: np.ndarray, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def big_photo_jpeg(side: int) -> bytes:
    """A photograph scaled up to side×side: slow to decode at full size, still a real photo."""
    return jpeg(np.asarray(Image.fromarray(photos.astronaut()).resize((side, side))), 95)


def my_segments() -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").glob(f"edgeserve_{os.getpid()}_*"))


@pytest.fixture
async def pool() -> AsyncIterator[PreprocPool]:
    p = PreprocPool(workers=2, params=PARAMS, max_pending=2)
    await p.start()
    yield p
    await p.close()
    assert my_segments() == []


async def test_a_job_returns_exactly_what_mm_preproc_computes(pool: PreprocPool) -> None:
    data = jpeg(photos.chelsea())
    got = await pool.submit(ImageInput(SourceKind.SHM, data=data))
    want = mm_preproc.preprocess(data, min_pixels=PARAMS.min_pixels, max_pixels=PARAMS.max_pixels,
                                 output=mm_preproc.OutputFormat.IMAGE)
    assert got.pixels.shape == want.image.shape == (want.target_height, want.target_width, 3)
    assert np.array_equal(got.pixels, want.image)
    r = got.result
    assert (r.source_width, r.source_height) == (451, 300)
    assert r.start_s <= r.decode_end_s <= r.resize_end_s <= r.normalize_end_s
    assert my_segments() == []  # the output segment's name is gone once the frontend maps it


async def test_base64_and_file_sources_give_the_same_pixels_and_hash(
    pool: PreprocPool, tmp_path: Path
) -> None:
    data = jpeg(photos.coffee())
    path = tmp_path / "coffee.jpg"
    path.write_bytes(data)
    a = await pool.submit(ImageInput(SourceKind.SHM, data=data))
    b = await pool.submit(ImageInput(SourceKind.SHM_BASE64, data=base64.b64encode(data)))
    c = await pool.submit(ImageInput(SourceKind.FILE, path=str(path)))
    assert np.array_equal(a.pixels, b.pixels) and np.array_equal(a.pixels, c.pixels)
    assert a.result.content_hash == b.result.content_hash == c.result.content_hash
    other = await pool.submit(ImageInput(SourceKind.SHM, data=jpeg(photos.chelsea())))
    assert other.result.content_hash != a.result.content_hash


@pytest.mark.parametrize(
    ("payload", "source", "message"),
    [
        (b"this is not an image", SourceKind.SHM, "cannot"),
        (jpeg(photos.chelsea())[:2000], SourceKind.SHM, ""),  # truncated
        (b"%PDF-1.4 hello", SourceKind.SHM, "PDF images are not supported"),
        (b"", SourceKind.SHM, "empty"),
        (b"!!!not base64!!!", SourceKind.SHM_BASE64, "not valid base64"),
        (jpeg(np.zeros((6000, 6000, 3), np.uint8)), SourceKind.SHM, "more than the limit"),
    ],
    ids=["garbage", "truncated", "pdf", "empty", "bad-base64", "decompression-bomb"],
)
async def test_bad_images_fail_as_bad_image_and_the_pool_keeps_serving(
    pool: PreprocPool, payload: bytes, source: SourceKind, message: str
) -> None:
    with pytest.raises(PreprocFailed) as e:
        await pool.submit(ImageInput(source, data=payload))
    assert e.value.kind is ErrorKind.BAD_IMAGE
    assert message.lower() in str(e.value).lower()
    ok = await pool.submit(ImageInput(SourceKind.SHM, data=jpeg(photos.chelsea())))
    assert ok.pixels.ndim == 3
    assert pool.deaths == 0


async def kill_the_busy_worker(pool: PreprocPool, spare: set[int]) -> int:
    """SIGKILL the worker that holds the (one) job in flight, once it is not one of ``spare``'s
    pids (killed ones); returns its pid."""
    while not any(s.busy and s.pid not in spare for s in pool.slots):
        await asyncio.sleep(0.001)
    pid = next(s.pid for s in pool.slots if s.busy and s.pid not in spare)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return pid


async def test_a_job_whose_worker_is_killed_is_retried_and_the_worker_replaced() -> None:
    pool = PreprocPool(workers=2, params=SLOW, max_pending=2)
    await pool.start()
    try:
        slow = big_photo_jpeg(5000)
        job = asyncio.ensure_future(pool.submit(ImageInput(SourceKind.SHM, data=slow)))
        victim = await kill_the_busy_worker(pool, set())
        done = await job
        want = mm_preproc.preprocess(slow, min_pixels=SLOW.min_pixels, max_pixels=SLOW.max_pixels,
                                     fast_decode=False, output=mm_preproc.OutputFormat.IMAGE)
        assert done.retries == 1 and np.array_equal(done.pixels, want.image)
        assert (pool.deaths, pool.retries) == (1, 1)
        assert my_segments() == []
        slot = next(s for s in pool.slots if s.restarts)
        assert slot.restarts == 1 and slot.pid != victim
        while not slot.ready:  # the replacement starts in about a second
            await asyncio.sleep(0.05)
        results = await asyncio.gather(*(pool.submit(ImageInput(SourceKind.SHM, data=jpeg(photos.coffee())))
                                         for _ in range(4)))
        assert {r.worker for r in results} == {0, 1} and {r.retries for r in results} == {0}
    finally:
        await pool.close()
    assert my_segments() == []


async def test_a_job_whose_worker_dies_on_both_attempts_fails_and_the_pool_serves_on() -> None:
    # an image that kills every worker it reaches: here each worker holding it gets SIGKILL
    pool = PreprocPool(workers=2, params=SLOW, max_pending=2)
    await pool.start()
    try:
        slow = big_photo_jpeg(5000)
        job = asyncio.ensure_future(pool.submit(ImageInput(SourceKind.SHM, data=slow)))
        first = await kill_the_busy_worker(pool, set())
        second = await kill_the_busy_worker(pool, {first})
        with pytest.raises(PreprocFailed) as e:
            await job
        assert e.value.kind is ErrorKind.WORKER_DIED and e.value.retries == 1
        message = str(e.value)
        assert f"pid {first})" in message and f"pid {second})" in message
        assert message.count("killed by SIGKILL") == 2 and "not tried again" in message
        assert (pool.deaths, pool.retries) == (2, 1)
        assert my_segments() == []
        after = await pool.submit(ImageInput(SourceKind.SHM, data=jpeg(photos.coffee())))
        assert after.pixels.ndim == 3 and after.retries == 0
        assert sorted(s.restarts for s in pool.slots) == [1, 1]
    finally:
        await pool.close()
    assert my_segments() == []


async def test_a_job_cancelled_while_it_waits_for_its_retry_leaves_nothing_behind() -> None:
    # one worker: after its death the retry waits for the replacement; the client leaves
    pool = PreprocPool(workers=1, params=SLOW, max_pending=2)
    await pool.start()
    try:
        job = asyncio.ensure_future(pool.submit(ImageInput(SourceKind.SHM, data=big_photo_jpeg(5000))))
        await kill_the_busy_worker(pool, set())
        while not pool.retries:
            await asyncio.sleep(0.001)
        assert pool.queued == 1 and my_segments() != []  # the input waits for the retry
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)
        assert pool.queued == 0 and my_segments() == []
        after = await pool.submit(ImageInput(SourceKind.SHM, data=jpeg(photos.coffee())))
        assert after.pixels.ndim == 3 and after.retries == 0
    finally:
        await pool.close()
    assert my_segments() == []


async def test_a_full_queue_refuses_new_jobs() -> None:
    pool = PreprocPool(workers=1, params=SLOW, max_pending=1)
    await pool.start()
    try:
        slow = big_photo_jpeg(4000)
        running = asyncio.ensure_future(pool.submit(ImageInput(SourceKind.SHM, data=slow)))
        await asyncio.sleep(0)
        queued = asyncio.ensure_future(pool.submit(ImageInput(SourceKind.SHM, data=slow)))
        await asyncio.sleep(0)
        assert (pool.running, pool.queued) == (1, 1)
        with pytest.raises(PoolFull):
            await pool.submit(ImageInput(SourceKind.SHM, data=slow))
        await asyncio.gather(running, queued)
    finally:
        await pool.close()
    assert my_segments() == []


async def test_cancelled_jobs_release_their_segments(pool: PreprocPool) -> None:
    slow = big_photo_jpeg(4000)
    tasks = [asyncio.ensure_future(pool.submit(ImageInput(SourceKind.SHM, data=slow)))
             for _ in range(4)]  # two run, two wait
    await asyncio.sleep(0.01)
    assert my_segments() != []
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    while pool.running:  # the workers finish; their late results are dropped and released
        await asyncio.sleep(0.01)
    assert my_segments() == []


async def test_a_job_waiting_behind_a_killed_workers_job_is_not_lost() -> None:
    # One worker holds two jobs: the first running, the second waiting in its pipe. Killing it
    # takes both back: the replacement runs the first again (its one retry), then the second.
    pool = PreprocPool(workers=1, params=SLOW, max_pending=4)
    await pool.start()
    try:
        slow = big_photo_jpeg(5000)
        first = asyncio.ensure_future(pool.submit(ImageInput(SourceKind.SHM, data=slow)))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(pool.submit(ImageInput(SourceKind.SHM, data=slow)))
        await asyncio.sleep(0)
        assert len(pool.slots[0].jobs) == 2
        os.kill(pool.slots[0].pid or 0, signal.SIGKILL)
        retried, done = await first, await second
        assert (retried.retries, done.retries) == (1, 0)
        assert retried.pixels.ndim == done.pixels.ndim == 3 and pool.slots[0].restarts == 1
        assert retried.result.start_s < done.result.start_s  # the retry kept its place in line
    finally:
        await pool.close()
    assert my_segments() == []


def test_segments_of_dead_servers_are_swept_and_live_ones_kept() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"edgeserve_{dead.pid}_0_in"
    live = f"edgeserve_{os.getpid()}_999999_in"
    for name in (stale, live):
        shm.create(name, 10).close()
    try:
        removed = shm.sweep_stale()
        assert stale in removed
        assert live not in removed and (Path("/dev/shm") / live).exists()
    finally:
        shm.unlink(stale)
        shm.unlink(live)


def minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])  # minflt


async def faults_per_image(params: PreprocParams, image: bytes, n: int = 4) -> float:
    p = PreprocPool(workers=1, params=params, max_pending=1)
    await p.start()
    try:
        await p.submit(ImageInput(SourceKind.SHM, data=image))  # first one: warm
        pid = p.worker_pids()[0]
        assert pid is not None
        before = minor_faults(pid)
        for _ in range(n):
            await p.submit(ImageInput(SourceKind.SHM, data=image))
        return (minor_faults(pid) - before) / n
    finally:
        await p.close()


async def test_a_worker_reuses_freed_memory_instead_of_faulting_in_every_image() -> None:
    # A 4000×3000 photo decodes at ½ scale (~12 MB), resizes through a ~7 MB intermediate to a
    # ~4 MB result: ~5,600 pages, all first-touch each image when malloc unmaps freed blocks
    # (glibc's defaults, retain_freed_bytes=0). The default keeps them; what still faults is the
    # per-job output segment (~700 pages). The workers' default is what the server runs.
    image = jpeg(np.asarray(Image.fromarray(photos.astronaut()).resize((4000, 3000))))
    params = PreprocParams(min_pixels=3136, max_pixels=1280 * 28 * 28,
                           max_image_pixels=30_000_000, max_image_bytes=64 << 20)
    kept = await faults_per_image(params, image)
    unkept = await faults_per_image(
        PreprocParams(min_pixels=3136, max_pixels=1280 * 28 * 28, max_image_pixels=30_000_000,
                      max_image_bytes=64 << 20, retain_freed_bytes=0), image)
    assert unkept > 3000
    assert kept < unkept / 3
