"""What each request carries: images, a prompt and an output length — all prepared before timing.

On a 2-core machine the load generator shares the CPU with the server it measures. Decoding,
drawing, JPEG-encoding or base64-encoding images while the clock runs would steal exactly the
resource under test, so :func:`prepare_requests` builds every request body (JSON bytes, image
embedded as a base64 data URL) up front and the timed part only writes bytes to a socket.

Image sources:

* ``photo`` (default): photographs shipped with scikit-image (astronaut, coffee, chelsea, rocket,
  Hubble deep field), centre-cropped to the target aspect ratio, upscaled with bicubic filtering and
  given a faint sensor grain so that they compress and decode like camera JPEGs, not like smooth
  upscales. Real pictures, synthetic sizes.
* ``noise``: uniform random pixels — the stated worst case for JPEG size and decode time.
* a folder of image files, sent as they are (or re-encoded when every request must be unique).

Sizes come from a *size mix*, ``"4000x3000"`` or weighted ``"640x480:2,1024x768:1"``, or a preset
name (:data:`SIZE_PRESETS`: ``12mp`` is a 4000×3000 phone photo, ``small`` a mix of web-sized
images).

**Every request gets a different image** unless told otherwise: servers cache preprocessed images
by content hash (vLLM's multimodal processor cache), and a benchmark that repeats one picture
measures the cache, not the preprocessing. Each image is stamped with its request number in a
small block of black and white squares in its top-left corner before JPEG encoding.
"""

from __future__ import annotations

import base64
import enum
import io
import json
import mimetypes
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SIZE_PRESETS: dict[str, str] = {
    "12mp": "4000x3000",
    "small": "448x448:1,640x480:2,800x600:1,1024x768:1",
    "1mp": "1280x800",
}
PHOTO_NAMES: tuple[str, ...] = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field")
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp"})
DEFAULT_PROMPT = "Describe this image in one sentence."


class ImageContent(enum.StrEnum):
    """What the pixels of synthetic images are."""

    PHOTO = "photo"  # scikit-image photographs, scaled to the size under test (headline figures)
    NOISE = "noise"  # uniform random pixels (worst case)


@dataclass(slots=True, frozen=True)
class ImageSize:
    width: int
    height: int
    weight: float = 1.0

    @property
    def pixels(self) -> int:
        return self.width * self.height


def parse_size_mix(spec: str) -> tuple[ImageSize, ...]:
    """``"12mp"`` | ``"4000x3000"`` | ``"640x480:2,1024x768:1"`` → sizes with relative weights."""
    spec = SIZE_PRESETS.get(spec.strip().lower(), spec)
    sizes = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*(?::\s*([0-9.]+))?\s*", part)
        if not m:
            raise ValueError(
                f"bad image size {part.strip()!r}: use WIDTHxHEIGHT[:WEIGHT], comma-separated, "
                f"or one of the presets {', '.join(SIZE_PRESETS)}"
            )
        w, h, weight = int(m[1]), int(m[2]), float(m[3] or 1.0)
        if w < 1 or h < 1 or weight <= 0:
            raise ValueError(f"bad image size {part.strip()!r}: sides and weight must be positive")
        sizes.append(ImageSize(w, h, weight))
    return tuple(sizes)


def parse_output_len(spec: str | int) -> tuple[int, int]:
    """``32`` → (32, 32); ``"16-64"`` → uniform between 16 and 64 tokens, both included."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(spec))
    if not m:
        raise ValueError(f"bad output length {spec!r}: use N or MIN-MAX (tokens)")
    lo, hi = int(m[1]), int(m[2] or m[1])
    if not 1 <= lo <= hi:
        raise ValueError(f"bad output length {spec!r}: need 1 <= MIN <= MAX")
    return lo, hi


@dataclass(slots=True, frozen=True)
class WorkloadConfig:
    """Everything that decides the bytes of the requests (not when they are sent)."""

    model: str = ""  # the "model" field of the request; empty → ask the server's /v1/models
    sizes: str = "12mp"  # size mix or preset (ignored for a folder)
    content: ImageContent = ImageContent.PHOTO
    folder: Path | None = None  # send these image files instead of synthetic ones
    images_per_request: int = 1  # 0 → text-only requests
    prompts: tuple[str, ...] = (DEFAULT_PROMPT,)  # cycled over requests
    output_len: str = "32"  # N or MIN-MAX tokens
    ignore_eos: bool = True  # generate exactly the drawn length (a vLLM extension field)
    unique_images: bool = True  # a different image in every request (defeats server caches)
    jpeg_quality: int = 90
    seed: int = 0
    size_mix: tuple[ImageSize, ...] = field(init=False, default=())
    output_len_range: tuple[int, int] = field(init=False, default=(32, 32))

    def __post_init__(self) -> None:
        if self.folder is None:
            object.__setattr__(self, "size_mix", parse_size_mix(self.sizes))
        elif not Path(self.folder).is_dir():
            raise ValueError(f"image folder {self.folder} does not exist")
        object.__setattr__(self, "output_len_range", parse_output_len(self.output_len))
        if self.images_per_request < 0:
            raise ValueError(f"images per request must be >= 0, got {self.images_per_request}")
        if not self.prompts or not all(p.strip() for p in self.prompts):
            raise ValueError("need at least one non-empty prompt")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"JPEG quality must be in 1..100, got {self.jpeg_quality}")

    @property
    def label(self) -> str:
        if self.images_per_request == 0:
            return "text only"
        what = f"folder {self.folder}" if self.folder else f"{self.content} {self.sizes}"
        return f"{self.images_per_request}× {what}, {self.output_len} output tokens"


@dataclass(slots=True, frozen=True)
class PreparedRequest:
    """One ready-to-send request: the exact HTTP body and what it contains."""

    index: int
    body: bytes  # JSON of a streaming /v1/chat/completions request
    max_tokens: int
    image_bytes: int  # encoded image bytes (before base64)
    image_pixels: int  # source pixels over all images of the request
    prompt_len: int = 0  # text tokens by the dataset's own count (0: not counted, image workload)


# ---- images ---------------------------------------------------------------------------------


def _stamp(pixels: np.ndarray, number: int) -> None:
    """Write ``number`` as 32 black/white 8×8 squares into the top-left corner (in place)."""
    h, w = pixels.shape[:2]
    sq = max(1, min(8, w // 32, h))
    for bit in range(32):
        value = 255 if (number >> bit) & 1 else 0
        pixels[0:sq, bit * sq : (bit + 1) * sq] = value


def _photo_base(name: str, width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """A scikit-image photo, centre-cropped to the aspect ratio, upscaled, with faint grain."""
    import skimage.data
    from PIL import Image

    src = np.asarray(getattr(skimage.data, name)())[..., :3]
    sh, sw = src.shape[:2]
    aspect = width / height
    if sw / sh > aspect:  # too wide: crop the sides
        cw = max(1, round(sh * aspect))
        src = src[:, (sw - cw) // 2 : (sw - cw) // 2 + cw]
    else:
        ch = max(1, round(sw / aspect))
        src = src[(sh - ch) // 2 : (sh - ch) // 2 + ch]
    img = Image.fromarray(np.ascontiguousarray(src)).resize((width, height), Image.Resampling.BICUBIC)
    arr = np.asarray(img, dtype=np.int16)
    grain = rng.integers(-3, 4, size=arr.shape, dtype=np.int16)  # camera-like high frequency
    return np.clip(arr + grain, 0, 255).astype(np.uint8)


def _encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


class ImageFactory:
    """Makes the n-th image of a workload as ``(encoded bytes, mime type, pixels)``."""

    def __init__(self, config: WorkloadConfig) -> None:
        self.config = config
        self._rng = np.random.default_rng(config.seed)
        self._bases: dict[tuple[str, int, int], np.ndarray] = {}
        self._files: list[Path] = []
        if config.folder is not None:
            self._files = sorted(
                p for p in Path(config.folder).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES
            )
            if not self._files:
                raise ValueError(
                    f"no images in {config.folder} (looked for {', '.join(sorted(IMAGE_SUFFIXES))})"
                )
        else:
            weights = np.array([s.weight for s in config.size_mix])
            self._probs = weights / weights.sum()

    def make(self, number: int) -> tuple[bytes, str, int]:
        if self._files:
            return self._from_folder(number)
        size = self.config.size_mix[self._rng.choice(len(self.config.size_mix), p=self._probs)]
        if self.config.content is ImageContent.NOISE:
            pixels = self._rng.integers(0, 256, size=(size.height, size.width, 3), dtype=np.uint8)
        else:
            name = PHOTO_NAMES[number % len(PHOTO_NAMES)]
            key = (name, size.width, size.height)
            if key not in self._bases:
                self._bases[key] = _photo_base(name, size.width, size.height, self._rng)
            pixels = self._bases[key]
            if self.config.unique_images:
                pixels = pixels.copy()
        if self.config.unique_images:
            _stamp(pixels, number)
        return _encode_jpeg(pixels, self.config.jpeg_quality), "image/jpeg", size.pixels

    def _from_folder(self, number: int) -> tuple[bytes, str, int]:
        from PIL import Image

        path = self._files[number % len(self._files)]
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            if not self.config.unique_images:
                mime = mimetypes.guess_type(path.name)[0] or "image/jpeg"
                return data, mime, width * height
            pixels = np.array(img.convert("RGB"))
        _stamp(pixels, number)
        return _encode_jpeg(pixels, self.config.jpeg_quality), "image/jpeg", width * height


# ---- request bodies -------------------------------------------------------------------------


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def chat_body(
    model: str, prompt: str, images: Iterable[tuple[bytes, str]], max_tokens: int, ignore_eos: bool
) -> bytes:
    """The JSON body of a streaming OpenAI chat completion with images as base64 data URLs."""
    content: list[dict[str, object]] = [
        {"type": "image_url", "image_url": {"url": data_url(data, mime)}} for data, mime in images
    ]
    content.append({"type": "text", "text": prompt})
    return messages_body(model, [{"role": "user", "content": content}], max_tokens, ignore_eos)


def messages_body(
    model: str, messages: list[dict[str, object]], max_tokens: int, ignore_eos: bool
) -> bytes:
    """The JSON body of a streaming OpenAI chat completion of ``messages``.

    Both ``max_tokens`` and ``max_completion_tokens`` are set (servers read one or the other);
    ``stream_options.include_usage`` asks for the token counts in a last chunk.
    """
    body: dict[str, object] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "max_completion_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


def prepare_requests(
    config: WorkloadConfig,
    n: int,
    model: str,
    first_number: int = 0,
    on_progress: Callable[[int], None] | None = None,
) -> list[PreparedRequest]:
    """Build ``n`` request bodies. ``first_number`` numbers the images (sweeps keep them unique).

    With ``unique_images`` off, only one image per (size, photo) is made and reused.
    """
    factory = ImageFactory(config)
    rng = np.random.default_rng(config.seed + 1_000_003 * first_number + 1)
    lo, hi = config.output_len_range
    cache: dict[int, tuple[bytes, str, int]] = {}
    out = []
    for i in range(n):
        number = first_number + i
        images = []
        for j in range(config.images_per_request):
            image_no = number * config.images_per_request + j
            if config.unique_images:
                images.append(factory.make(image_no))
            else:  # reuse one image per pool slot; the pool is as large as the photo set
                slot = image_no % len(PHOTO_NAMES)
                if slot not in cache:
                    cache[slot] = factory.make(slot)
                images.append(cache[slot])
        max_tokens = int(rng.integers(lo, hi + 1))
        prompt = config.prompts[number % len(config.prompts)]
        body = chat_body(model, prompt, ((d, m) for d, m, _ in images), max_tokens, config.ignore_eos)
        out.append(
            PreparedRequest(
                index=i,
                body=body,
                max_tokens=max_tokens,
                image_bytes=sum(len(d) for d, _, _ in images),
                image_pixels=sum(p for _, _, p in images),
            )
        )
        if on_progress is not None:
            on_progress(1)
    return out
