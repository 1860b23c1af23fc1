"""A config's ``quantization_config`` read, and checked, once: where the config is read (``check_quantization_config``,
called by ``hf.draft_from_hf`` and ``resolve.draft_from_dict``), so every command refuses a malformed block with the
same line, and what sizes the weights (``analytic/quant.py``) reads the same ``Quantization`` back.

Two kinds of refusal:

- a malformed block (a value of the wrong JSON type, a bit width or group size the format does not define, a block
  of zero): one ``SpecError`` naming the key, refused by every command, ``params`` included;
- a well-formed block in a format llmcalc does not size (an unknown ``quant_method``, mixed compressed-tensors
  groups, a ModelOpt algorithm other than NVFP4/FP8): ``UnsizedFormat``, refused only where the weights' bytes are
  needed (``serve``, ``infer``, ``memory --finetune``), which ``--weight-dtype`` sizes instead; counting parameters
  needs no storage format.

What each format allows, from the library that reads it back:

- GPTQ (transformers ``GPTQConfig.post_init``): ``bits`` in 2, 3, 4, 8, required (``GPTQConfig(bits, ...)`` has no
  default); ``group_size`` > 0 or -1 (per column), default 128.
- AWQ (transformers ``AwqConfig``: bits default 4, group_size default 128, "-1 uses per-column quantization",
  zero_point default true; vLLM ``AWQConfig``: "only 4-bit weight quantization is supported"): ``bits`` 4.
- auto-round (transformers ``AutoRoundConfig.post_init``): ``bits`` 2 to 8, default 4; group_size as GPTQ.
- fp8 (``FineGrainedFP8Config.post_init``): ``weight_block_size`` two positive whole numbers; ``activation_scheme``
  dynamic or static.
- bitsandbytes (``BitsAndBytesConfig``): the load_in_* flags booleans, not both; ``bnb_4bit_quant_type`` nf4 or fp4
  (default fp4).
- compressed-tensors (``QuantizationArgs``): ``num_bits`` default 8; ``type`` int or float; ``strategy`` inferred
  from ``group_size`` when absent (none: tensor, > 0: group, -1: channel); group and tensor_group need a positive
  ``group_size``, block needs a ``block_structure`` [rows, cols] (or its older "rows x cols" string, which
  QuantizationArgs still reads); ``actorder`` a boolean or a name.

Config flags (``zero_point``, ``desc_act``, ``lm_head``, ``symmetric``, ``load_in_4bit`` ...) must be JSON booleans:
the string "false" is not false.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from contextlib import suppress
from dataclasses import field
from typing import Protocol

from ..errors import LlmcalcError
from ..records import dataclass
from .draft import SpecError

KNOWN_METHODS = ("mxfp4", "fp8", "fbgemm_fp8", "awq", "gptq", "auto-round", "compressed-tensors", "modelopt",
                 "bitsandbytes")
GPTQ_BITS = (2, 3, 4, 8)  # transformers GPTQConfig.post_init
AWQ_BITS = (4,)  # vLLM AWQConfig: "Currently, only 4-bit weight quantization is supported for AWQ"
AUTO_ROUND_BITS = (2, 3, 4, 5, 6, 7, 8)  # transformers AutoRoundConfig.post_init
DEFAULT_GROUP_SIZE = 128  # GPTQConfig, AwqConfig and AutoRoundConfig: group_size defaults to 128
CT_STRATEGIES = ("tensor", "channel", "group", "block", "token", "tensor_group", "attn_head")
SKIP_KEYS = ("modules_to_not_convert", "ignore", "ignored_layers", "exclude_modules", "llm_int8_skip_modules",
             "modules_to_not_quantize")


class UnsizedFormat(LlmcalcError):
    """A well-formed quantization_config in a format llmcalc does not size (pass --weight-dtype)."""


class Named(Protocol):
    """What ``Quantization.quantizes`` reads of a module (``analytic.quant.Module``)."""

    @property
    def kind(self) -> str: ...

    def names(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Format:
    """How one quantized d_out x d_in linear is stored: `bits` per weight, scales (`per` tensor, channel, group of
    `group` inputs, block `block`, bnb4 64-blocks) of `scale_bytes` each, optional zero points at `bits` per group,
    act-order g_idx (4 B per input), and `extra` bytes per linear (global/input scales, shape tensors)."""

    label: str
    bits: float
    per: str = "tensor"  # tensor | channel | group | block | bnb4
    group: int = 0
    block: tuple[int, int] = (0, 0)
    scale_bytes: float = 4.0
    zero_points: bool = False
    g_idx: bool = False
    double_quant: bool = False
    extra: float = 0.0
    source: str = ""

    def scales(self, d_in: int, d_out: int) -> int:
        if self.per == "tensor":
            return 1
        if self.per == "channel":
            return d_out
        if self.per == "group":
            return d_out * math.ceil(d_in / (self.group if self.group > 0 else d_in))
        if self.per == "block":
            return math.ceil(d_out / self.block[0]) * math.ceil(d_in / self.block[1])
        raise ValueError(self.per)

    def linear_bytes(self, d_in: int, d_out: int) -> float:
        """Bytes of one linear as stored (the formulas of analytic/quant.py's docstring)."""
        n = d_in * d_out
        if self.per == "bnb4":  # bitsandbytes functional.quantize_4bit, QuantState.as_dict(packed=True)
            blocks = math.ceil(n / 64)
            if not self.double_quant:  # uint8 codes + fp32 absmax per 64 + 16-entry fp32 code + JSON (~80 B)
                return math.ceil(n / 2) + 4 * blocks + 64 + 80
            # uint8 absmax per 64, fp32 absmax per 256 of them, 256-entry fp32 nested code, the code, JSON (~170 B)
            return math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / 256) + 1024 + 64 + 170
        groups = self.scales(d_in, d_out)
        zeros = groups * self.bits / 8 if self.zero_points else 0.0
        return n * self.bits / 8 + groups * self.scale_bytes + zeros + (4 * d_in if self.g_idx else 0) + self.extra

    def bytes_per_weight(self, d_in: int = 4096, d_out: int = 4096) -> float:
        return self.linear_bytes(d_in, d_out) / (d_in * d_out)


@dataclass(frozen=True)
class Quantization:
    """A config's quantization_config, read: the method, how its linears are stored, which modules it leaves
    alone (`skip`: substring, glob or "re:" regex patterns) or alone quantizes (`only`), and what else it says."""

    method: str
    format: Format
    skip: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None  # allow-list (GPTQ modules_in_block_to_quantize, CT name targets)
    experts_only: bool = False  # mxfp4: transformers converts GptOssExperts only
    quantize_head: bool = False
    quantize_router: bool = False
    notes: tuple[str, ...] = field(default=())
    storage: str = ""  # bitsandbytes: nf4, fp4 or int8 (memory --finetune's frozen base dtype)

    @property
    def label(self) -> str:
        return self.format.label

    def quantizes(self, module: Named) -> bool:
        if module.kind == "embedding":
            return False
        if self.experts_only and module.kind != "expert":
            return False
        if module.kind == "head" and not self.quantize_head:
            return False
        if module.kind == "router" and not self.quantize_router:
            return False
        if any(_matcher(self.skip)(n) for n in module.names()):
            return False
        return self.only is None or any(_matcher(self.only)(n) for n in module.names())


@functools.lru_cache(maxsize=256)
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a name matches any of `patterns`, compiled once per list (the globs and plain entries as one
    alternation: Meta's FP8 Llama 3.1 405B skips 511 modules by name; the "re:" entries each on its own).

    How the libraries match a skip entry: "re:<regex>" (compressed-tensors) by re.match; a glob with "*" (gpt-oss's
    "model.layers.*.self_attn") on the name or a prefix of it; anything else as whole dotted parts of the name,
    anywhere in it: "self_attn" skips "model.layers.0.self_attn.q_proj", "model.layers.1" skips that layer and not
    layer 11, and MiniMax-M2's "gate" (its router, ``block_sparse_moe.gate``) skips the router and not the experts'
    or an MLP's ``gate_proj``. transformers 5.25's should_convert_module (quantizers_utils.py) matches a prefix up
    to a module boundary ("mlp.gate" not "mlp.gate_proj") or a suffix; MiniMax-M2.7's checkpoint (214.32 GiB: every
    expert in fp8, the routers not) says its "gate" is the router alone."""
    regexes = [re.compile(p[3:]) for p in patterns if p.startswith("re:")]
    globs = [re.escape(p).replace(r"\*", r"[^.]*") for p in patterns if not p.startswith("re:") and "*" in p]
    plain = [re.escape(p.strip(".")) for p in patterns if not p.startswith("re:") and "*" not in p]
    parts = ([rf"^(?:{'|'.join(globs)})(?:\.|$)"] if globs else []) + \
        ([rf"(?:^|\.)(?:{'|'.join(plain)})(?:\.|$)"] if plain else [])
    joined = re.compile("|".join(parts)) if parts else None

    def matches(name: str) -> bool:
        return (joined is not None and joined.search(name) is not None) or \
            any(r.match(name) is not None for r in regexes)

    return matches


# --- the checks: one SpecError naming the key --------------------------------------------------------------


def _refuse(key: str, wanted: str, value: object) -> SpecError:
    return SpecError(f"quantization_config {key} must be {wanted}, got {value!r:.60}")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(qc: dict, key: str, default: int, at: str = "") -> int:
    value = qc.get(key)
    if value is None:
        return default
    if not _whole(value):
        raise _refuse(at + key, "a whole number", value)
    return value


def _bits(qc: dict, keys: tuple[str, ...], allowed: tuple[int, ...], default: int | None, method: str) -> int:
    """A bit width the format defines: the first of `keys` the block gives, else `default` (None: required)."""
    key = next((k for k in keys if qc.get(k) is not None), keys[0])
    value = qc.get(key)
    widths = ", ".join(map(str, allowed))
    if value is None:
        if default is None:
            raise SpecError(f"quantization_config {method} has no {key}; give its bit width ({widths})")
        return default
    if not _whole(value) or value not in allowed:
        raise _refuse(key, f"a bit width {method} defines ({widths})", value)
    return value


def _group_size(qc: dict, keys: tuple[str, ...]) -> int:
    """GPTQ/AWQ/auto-round group_size: > 0, or -1 for one group per column; absent, the libraries' 128."""
    key = next((k for k in keys if qc.get(k) is not None), keys[0])
    value = qc.get(key)
    if value is None:
        return DEFAULT_GROUP_SIZE
    if not _whole(value) or (value < 1 and value != -1):
        raise _refuse(key, "a whole number >= 1 (or -1, one group per column)", value)
    return value


def _flag(qc: dict, key: str, default: bool, at: str = "") -> bool:
    value = qc.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _refuse(at + key, "true or false (a JSON boolean)", value)
    return value


def _name(qc: dict, key: str, default: str, at: str = "") -> str:
    value = qc.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _refuse(at + key, "a string", value)
    return value


def _object(qc: dict, key: str) -> dict:
    value = qc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refuse(key, "a JSON object", value)
    return value


def _block(value: object, key: str) -> tuple[int, int]:
    """Two whole numbers >= 1, [rows, cols]; compressed-tensors also reads its older "rows x cols" string."""
    if isinstance(value, str) and key.endswith("block_structure"):
        rows, sep, cols = value.partition("x")
        if sep and rows.strip().isdigit() and cols.strip().isdigit():
            value = [int(rows), int(cols)]
    if not (isinstance(value, list) and len(value) == 2 and all(_whole(b) and b >= 1 for b in value)):
        raise _refuse(key, "two whole numbers >= 1, [rows, cols] such as [128, 128]", value)
    return value[0], value[1]


def _patterns(value: object, key: str) -> tuple[str, ...]:
    """Module names: a string, a list of them, or GPTQ's modules_in_block_to_quantize (a list of lists)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        flat = [v for item in value for v in (item if isinstance(item, list) else [item])]
        if all(isinstance(v, str) for v in flat):
            return tuple(flat)
    raise _refuse(key, "a list of module names", value)


def _skips(qc: dict) -> tuple[str, ...]:
    out: tuple[str, ...] = ()
    for key in SKIP_KEYS:
        out += _patterns(qc.get(key), key)
    return out


# --- the formats ---------------------------------------------------------------------------------------------


FP8_SOURCE = ("transformers FineGrainedFP8Config (weight_block_size, modules_to_not_convert), integrations/"
              "finegrained_fp8.py FP8Linear: weight fp8 [out, in] + weight_scale_inv fp32 [ceil(out/bn), ceil(in/bk)]; "
              "vLLM fp8.py Fp8LinearMethod.create_weights")


def _fp8(qc: dict) -> Quantization:
    block = qc.get("weight_block_size")
    scheme = _name(qc, "activation_scheme", "dynamic").lower()
    if scheme not in ("dynamic", "static"):
        raise _refuse("activation_scheme", "dynamic or static", qc.get("activation_scheme"))
    static = scheme == "static"
    if block is not None:
        bn, bk = _block(block, "weight_block_size")
        fmt = Format(f"fp8 block {bn}x{bk}", 8, "block", block=(bn, bk), scale_bytes=4, extra=4.0 * static,
                     source=FP8_SOURCE)
    else:
        fmt = Format("fp8 per-tensor", 8, "tensor", scale_bytes=4, extra=4.0 * static, source=FP8_SOURCE)
    return Quantization("fp8", fmt, _skips(qc))


def _awq(qc: dict, method: str = "awq") -> Quantization:
    allowed = AUTO_ROUND_BITS if method == "auto-round" else AWQ_BITS
    bits, g = _bits(qc, ("bits", "w_bit"), allowed, 4, method), _group_size(qc, ("group_size", "q_group_size"))
    zero = _flag(qc, "zero_point", True)
    version = _name(qc, "version", "gemm").lower()
    if version not in ("gemm", "gemv", "gemv_fast", "marlin", "exllama", "ipex"):
        raise UnsizedFormat(f"quantization_config awq version {version!r:.20} is not one llmcalc sizes (gemm, gemv); "
                            f"pass --weight-dtype")
    fmt = Format(f"awq int{bits} g{g}", bits, "group", group=g, scale_bytes=2, zero_points=zero,
                 source="vLLM awq.py AWQLinearMethod.create_weights: qweight int32 [in, out·b/32], qzeros int32 "
                        "[in/g, out·b/32], scales fp16 [in/g, out]")
    return Quantization(method, fmt, _skips(qc))


def _gptq(qc: dict, method: str = "gptq") -> Quantization:
    auto_round = method == "auto-round"
    bits = _bits(qc, ("bits",), AUTO_ROUND_BITS if auto_round else GPTQ_BITS, 4 if auto_round else None, method)
    g = _group_size(qc, ("group_size",))
    desc = _flag(qc, "desc_act", False) and not auto_round
    fmt = Format(f"gptq int{bits} g{g}" + (" act-order" if desc else ""), bits, "group", group=g, scale_bytes=2,
                 zero_points=True, g_idx=True,
                 source="vLLM gptq create_weights: qweight int32 [in·b/32, out], qzeros int32 [groups, out·b/32], "
                        "scales fp16 [groups, out], g_idx int32 [in]")
    only = _patterns(qc.get("modules_in_block_to_quantize"), "modules_in_block_to_quantize") or None
    skips = _skips(qc)
    for key in _object(qc, "dynamic"):
        if not str(key).startswith("-:"):
            raise UnsizedFormat(f"quantization_config dynamic override {key!r:.40} changes the format of some "
                                f"modules, which llmcalc does not size; pass --weight-dtype")
        skips += ("re:" + str(key)[2:],)
    return Quantization(method, fmt, skips, only=only, quantize_head=_flag(qc, "lm_head", False))


def _bnb(qc: dict) -> Quantization:
    four = _flag(qc, "load_in_4bit", False) or _flag(qc, "_load_in_4bit", False)
    eight = _flag(qc, "load_in_8bit", False) or _flag(qc, "_load_in_8bit", False)
    skips = _skips(qc) + ("lm_head",)  # transformers adds the output embedding (get_keys_to_not_convert)
    src = "bitsandbytes 0.50.2 quantize_4bit / int8_vectorwise_quant, serialized by QuantState.as_dict(packed=True)"
    if four and eight:  # BitsAndBytesConfig: "load_in_4bit and load_in_8bit are both True"
        raise SpecError("quantization_config bitsandbytes sets both load_in_4bit and load_in_8bit; keep one")
    kind = _name(qc, "bnb_4bit_quant_type", "fp4")  # BitsAndBytesConfig's default
    if four:
        if kind not in ("nf4", "fp4"):
            raise _refuse("bnb_4bit_quant_type", "nf4 or fp4", kind)
        dq = _flag(qc, "bnb_4bit_use_double_quant", False)
        fmt = Format(f"bitsandbytes {kind}" + (" double-quant" if dq else ""), 4, "bnb4", double_quant=dq,
                     source=src)
    elif eight:
        fmt = Format("bitsandbytes int8", 8, "channel", scale_bytes=4, source=src)
    else:
        raise SpecError("quantization_config bitsandbytes sets neither load_in_4bit nor load_in_8bit to true")
    return Quantization("bitsandbytes", fmt, skips, quantize_router=True, storage=kind if four else "int8")


NVFP4 = Format("nvfp4", 4, "group", group=16, scale_bytes=1, extra=8,
               source="ModelOpt / compressed-tensors nvfp4: weight uint8 [out, in/2] + weight_scale fp8 [out, in/16] "
                      "+ weight_scale_2 / global scale fp32 + input scale fp32")


def _modelopt(qc: dict) -> Quantization:
    inner = _object(qc, "quantization")
    algo = _name(qc, "quant_algo", "") or _name(inner, "quant_algo", "")
    skips = _skips(qc) + _skips(inner)
    if algo.upper() == "NVFP4":
        return Quantization("modelopt", NVFP4, skips, quantize_head="lm_head" not in " ".join(skips))
    if algo.upper() == "FP8":
        fmt = Format("fp8 per-tensor (ModelOpt)", 8, "tensor", scale_bytes=4, extra=4,
                     source="vLLM modelopt.py ModelOptFp8LinearMethod: weight fp8 + weight_scale fp32 + input_scale")
        return Quantization("modelopt", fmt, skips, quantize_head="lm_head" not in " ".join(skips))
    raise UnsizedFormat(f"quantization_config modelopt quant_algo {algo.upper() or 'missing'!r:.20} is not one "
                        f"llmcalc sizes (NVFP4, FP8); pass --weight-dtype")


def _compressed_tensors(qc: dict) -> Quantization:
    groups = _object(qc, "config_groups")
    fmt_name = _name(qc, "format", "")
    if not groups:
        raise UnsizedFormat("quantization_config compressed-tensors has no config_groups to size; pass --weight-dtype")
    if len(groups) > 1:
        raise UnsizedFormat(f"quantization_config compressed-tensors has {len(groups)} config_groups (mixed "
                            f"formats); llmcalc sizes one; pass --weight-dtype")
    name, group = next(iter(groups.items()))
    where = f"config_groups.{str(name):.20}"
    if not isinstance(group, dict):
        raise _refuse(where, "a JSON object", group)
    weights = group.get("weights")
    if weights is not None and not isinstance(weights, dict):
        raise _refuse(f"{where}.weights", "a JSON object", weights)
    w, at = weights or {}, f"{where}.weights."
    bits = _int(w, "num_bits", 8, at)
    kind = _name(w, "type", "int", at).lower()
    if kind not in ("int", "float"):
        raise _refuse(at + "type", "int or float", w.get("type"))
    if bits not in ((4, 8) if kind == "float" else range(1, 9)):
        raise _refuse(at + "num_bits", "4 or 8 for float weights" if kind == "float" else "a whole number 1 to 8",
                      bits)
    g = w.get("group_size")
    if g is not None and (not _whole(g) or (g < 1 and g != -1)):
        raise _refuse(at + "group_size", "a whole number >= 1 (or -1, one scale per channel)", g)
    strategy = _name(w, "strategy", "tensor" if g is None else "group" if g > 0 else "channel", at).lower()
    if strategy not in CT_STRATEGIES:
        raise _refuse(at + "strategy", f"one of {', '.join(CT_STRATEGIES)}", w.get("strategy"))
    actorder = w.get("actorder")
    if actorder is not None and not isinstance(actorder, (bool, str)):
        raise _refuse(at + "actorder", "true, false or a name such as \"group\"", actorder)
    asym = not _flag(w, "symmetric", True, at)
    targets = _patterns(group.get("targets", ["Linear"]), f"{where}.targets")
    only = None if "Linear" in targets else targets
    src = ("vLLM compressed_tensors schemes (wNa16 weight_packed/weight_scale/weight_zero_point/weight_g_idx, "
           "w8a8_fp8, w4a4_nvfp4); scales in the model dtype")
    skips = _skips(qc)
    if fmt_name == "nvfp4-pack-quantized" or (kind == "float" and bits == 4):
        return Quantization("compressed-tensors", NVFP4, skips, only=only, quantize_head=True)
    if strategy == "block":
        if w.get("block_structure") is None:  # QuantizationArgs: "Block strategy requires block structure"
            raise SpecError(f"quantization_config {at}block_structure is missing; the block strategy needs "
                            f"[rows, cols] such as [128, 128]")
        bn, bk = _block(w["block_structure"], at + "block_structure")
        fmt = Format(f"compressed-tensors {kind}{bits} block {bn}x{bk}", bits, "block", block=(bn, bk),
                     scale_bytes=2, source=src)
    elif strategy in ("group", "tensor_group"):
        if g is None or g < 1:  # QuantizationArgs: "strategy group requires group_size to be set to a positive value"
            raise _refuse(at + "group_size", f"a whole number >= 1 for strategy {strategy}", g)
        act = actorder is True or (isinstance(actorder, str) and actorder.lower() == "group")
        packed = fmt_name in ("pack-quantized", "marlin-24") or bits < 8
        fmt = Format(f"compressed-tensors {kind}{bits} g{g}", bits if packed else 8, "group", group=g, scale_bytes=2,
                     zero_points=asym, g_idx=act, extra=16.0 * packed, source=src)
    elif strategy in ("channel", "tensor"):
        fmt = Format(f"compressed-tensors {kind}{bits} per-{strategy}", bits, strategy, scale_bytes=2, source=src)
    else:
        raise UnsizedFormat(f"quantization_config compressed-tensors strategy {strategy!r:.20} is not one llmcalc "
                            f"sizes; pass --weight-dtype")
    return Quantization("compressed-tensors", fmt, skips, only=only, quantize_head=True)


def parse_quantization(qc: dict) -> Quantization:
    """A quantization_config (as published) read into a Quantization; a malformed one is one SpecError naming the
    key, one in a format llmcalc does not size one UnsizedFormat."""
    if not isinstance(qc, dict):
        raise SpecError(f"quantization_config must be a JSON object, got {qc!r:.60}")
    raw = qc.get("quant_method")
    if raw is None and not ("load_in_4bit" in qc or "load_in_8bit" in qc):
        raise SpecError("quantization_config has no quant_method; give the method the checkpoint was quantized "
                        f"with (one of {', '.join(KNOWN_METHODS)}) or drop the block")
    if raw is not None and not isinstance(raw, str):
        raise _refuse("quant_method", "a method name such as \"gptq\"", raw)
    method = (raw or "bitsandbytes").lower()
    if method == "mxfp4":
        fmt = Format("mxfp4", 4, "group", group=32, scale_bytes=1,
                     source="transformers integrations/mxfp4.py: *_blocks uint8 [E, out, in/32, 16] + *_scales uint8 "
                            "(E8M0) [E, out, in/32]")
        return Quantization("mxfp4", fmt, _skips(qc), experts_only=True)
    if method == "fp8":
        return _fp8(qc)
    if method == "fbgemm_fp8":
        fmt = Format("fp8 per-channel (fbgemm)", 8, "channel", scale_bytes=4,
                     source="transformers integrations/fbgemm_fp8.py: weight fp8 [out, in] + weight_scale fp32 "
                            "[out, 1]")
        return Quantization(method, fmt, _skips(qc))
    if method == "awq":
        return _awq(qc)
    if method == "gptq":
        return _gptq(qc)
    if method == "auto-round":
        packing = _name(qc, "packing_format", "auto_gptq")
        return _awq(qc, method) if "awq" in packing else _gptq(qc, method)
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    if method == "modelopt":
        return _modelopt(qc)
    if method == "bitsandbytes":
        return _bnb(qc)
    _skips(qc)  # the skip lists are read alike whatever the method
    raise UnsizedFormat(f"quantization_config quant_method {method!r:.40} is not a format llmcalc sizes "
                        f"(it knows {', '.join(KNOWN_METHODS)}); pass --weight-dtype to size the weights yourself")


def check_quantization_config(qc: object) -> None:
    """Where a config is read: refuse a malformed quantization_config (one SpecError naming the key); a
    well-formed one llmcalc does not size passes (``UnsizedFormat`` is raised where the weights are sized)."""
    if qc is None:
        return
    if not isinstance(qc, dict):
        raise SpecError(f"quantization_config must be a JSON object, got {qc!r:.60}")
    with suppress(UnsizedFormat):
        parse_quantization(qc)
