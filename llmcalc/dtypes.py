"""The one dtype vocabulary: what people type for a number format, its canonical name, its size.

Every command and every formula reads dtypes through this module, so ``bfloat16`` means ``bf16``
everywhere (as do ``BF16``, ``torch.bfloat16`` and ``float16`` -> ``fp16``). Canonical names are
the short ones the hardware catalog uses for its peaks (``dense_tflops``).

Sizes are storage bytes per element: tf32 is stored as fp32 (4 bytes; it is a Tensor Core compute
mode), int4 packs two values per byte (0.5), as do the 4-bit floats mxfp4 (OCP Microscaling e2m1, one e8m0
scale per 32) and nvfp4 (NVIDIA NVFP4 e2m1, one fp8 e4m3 scale per 16). Quantisation scales and zero-points
are not included (analytic/quant.py counts them per format).
"""

from __future__ import annotations

from .errors import LlmcalcError

# Canonical name -> bytes per element, widest first.
DTYPE_BYTES: dict[str, float] = {"fp64": 8.0, "fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0,
                                 "int8": 1.0, "int4": 0.5, "mxfp4": 0.5, "nvfp4": 0.5}
DTYPES = tuple(DTYPE_BYTES)

# What people type -> canonical name (lower case; "torch." and surrounding spaces are stripped first).
DTYPE_ALIASES: dict[str, str] = {
    **{name: name for name in DTYPES},
    "float64": "fp64", "double": "fp64",
    "float32": "fp32", "float": "fp32",
    "tensorfloat32": "tf32",
    "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16",
    "float8": "fp8", "e4m3": "fp8", "e5m2": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "qint8": "int8",
    "mx_fp4": "mxfp4", "nv_fp4": "nvfp4",
}


def canonical_dtype(dtype: str, what: str = "dtype", allowed: tuple[str, ...] = DTYPES) -> str:
    """The canonical name of `dtype` (``bfloat16`` -> ``bf16``), or one LlmcalcError naming `what`
    (e.g. ``--kv-dtype``) and the names it accepts (`allowed`, canonical)."""
    key = str(dtype).strip().lower().removeprefix("torch.")
    name = DTYPE_ALIASES.get(key)
    if name is None or name not in allowed:
        raise LlmcalcError(f"{what}: unknown dtype {dtype!r}; use one of {', '.join(allowed)} "
                           f"(aliases such as bfloat16, float16, float32 work too)")
    return name


def dtype_bytes(dtype: str, what: str = "dtype") -> float:
    """Bytes per element of `dtype` (any spelling in DTYPE_ALIASES)."""
    return DTYPE_BYTES[canonical_dtype(dtype, what)]
