"""The Qwen2-VL vision tower as one ONNX graph, checked against transformers' own tower.

A vision-language request costs two very different computations: the vision tower turns an
image's 14×14 patches into image tokens (a ViT: attention over all patches of a frame, then a 2×2
merge into the language model's width), and the language model decodes. On an edge device the
first belongs on an NPU or a CPU of its own, the second on vLLM. The split point is the tower's
output: vLLM accepts ``image_embeds`` (tokens, LM hidden) with the ``image_grid_thw`` that
produced them in place of ``pixel_values`` — exactly what
``Qwen2VLForConditionalGeneration.model.visual(pixel_values, grid_thw=G)`` returns. This module
writes that tower as ``encoder.onnx`` for ONNX Runtime, whose execution providers (CPU, QNN,
OpenVINO, VitisAI, CoreML, …) are how a user picks the unit that runs it::

    pixel_values   float32 (num_patches, C·T·P·P)   (n, 1176) for Qwen2-VL, as mm_preproc makes it
    image_grid_thw int64   (1, 3)                   the image's (t, h, w) patch grid
    image_embeds   float32 (n / merge², hidden)     hidden = the language model's width

The number of patches is dynamic: one graph serves every image size. One run encodes one image
(or one video: t frames); :class:`OnnxEncoder` runs a call with several images image by image
and concatenates the rows, which is the same function (attention never crosses an image). The
rotary position ids are derived from ``image_grid_thw`` *inside* the graph, so a caller passes
nothing but the two arrays above.

The package, one concept a module:

* :mod:`~models.onnx_encoder.meta` — ``encoder.json`` (:class:`EncoderMeta`) and the interface's names;
* :mod:`~models.onnx_encoder.graph` — the tower rewritten so that one graph serves every image size;
* :mod:`~models.onnx_encoder.export` — ``torch.onnx.export`` of that module, then verification;
* :mod:`~models.onnx_encoder.verify` — the graph against transformers' tower;
* :mod:`~models.onnx_encoder.runtime` — the graph in ONNX Runtime or OpenVINO (what a server imports).

Not covered: the Qwen2.5-VL (window
attention, ``fullatt_block_indexes``) and Qwen3-VL (deepstack) towers; full-size towers above
2 GiB of float32 weights, for which the exporters write external data files beside the graph
(not exercised here); quantised or lower-precision graphs.
"""

from models.onnx_encoder.export import DEFAULT_OPSET, Exporter, export_encoder
from models.onnx_encoder.graph import CONTRIB_DOMAIN
from models.onnx_encoder.meta import (
    GRAPH_NAME,
    INPUT_NAMES,
    META_NAME,
    OUTPUT_NAME,
    SUPPORTED_MODEL_TYPES,
    Check,
    EncoderMeta,
    NotQwen2VLError,
    read_model_config,
    weights_fingerprint,
)
from models.onnx_encoder.runtime import (
    OPENVINO_PREFIX,
    OnnxEncoder,
    OpenVinoEncoder,
    ProviderNotAvailableError,
    is_openvino,
    open_encoder,
    resolve_openvino,
    resolve_providers,
)
from models.onnx_encoder.verify import (
    CHECK_IMAGES,
    check_inputs,
    load_reference_tower,
    reference_embeds,
    verify,
)

__all__ = [
    "CHECK_IMAGES", "CONTRIB_DOMAIN", "DEFAULT_OPSET", "GRAPH_NAME", "INPUT_NAMES", "META_NAME",
    "OPENVINO_PREFIX", "OUTPUT_NAME", "SUPPORTED_MODEL_TYPES", "Check", "EncoderMeta", "Exporter",
    "NotQwen2VLError", "OnnxEncoder", "OpenVinoEncoder", "ProviderNotAvailableError",
    "check_inputs", "export_encoder", "is_openvino", "load_reference_tower", "open_encoder",
    "read_model_config", "reference_embeds", "resolve_openvino", "resolve_providers", "verify",
    "weights_fingerprint",
]
