"""What ``hf_families``, ``hf_2026`` and ``hf_ssm`` need: the ``Family`` record of one HF model_type, and the MLP
kind an activation name means. None imports another's tables from here, so there is no import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from ..records import dataclass
from .draft import SpecError


class NoFormula(SpecError):
    """A config of a family llmcalc has formulas for, with a part none of them covers (its text says what, e.g.
    "nemotron_h with moe_latent_size 1024: no formula for the latent MoE projection"). ``draft_from_hf`` turns it
    into ``UnknownModelType`` carrying the config, so the whole model is counted by transformers with this line as
    its note, and the commands that need the formula refuse with it."""


@dataclass(frozen=True)
class Family:
    """What one HF model_type leaves implicit. `source` names the modelling file it mirrors."""

    source: str
    implicit: dict  # SpecDraft fields fixed by the modelling code
    defaults: dict = field(default_factory=dict)  # HF config-class defaults for absent keys
    derive: Callable[[dict, dict], None] | None = None  # (hf config, spec kwargs) -> fills kwargs
    gated: bool = True  # FFN with gate/up/down (SwiGLU/GeGLU) rather than up/down
    keep_null: tuple[str, ...] = ()  # keys whose explicit null means something else than "absent"
    # The config class's attribute_map, alias -> the field it sets: an alias in the file wins over the field's own
    # key (PreTrainedConfig sets the field through the alias), so the derive step reads the field's name only.
    aliases: dict[str, str] = field(default_factory=dict)
    # HF keys of HF_KEYS the derive step reads itself when a config gives them per layer (a JSON list); any other
    # per-layer list has no formula in this family (NoFormula: counted by transformers).
    per_layer: tuple[str, ...] = ()

    def unalias(self, hf: dict) -> dict:
        """`hf` with each alias key replaced by the field it sets (its value winning), as the config class reads it."""
        if not self.aliases:
            return hf
        out = {k: v for k, v in hf.items() if k not in self.aliases}
        out.update({field_: hf[alias] for alias, field_ in self.aliases.items() if alias in hf})
        return out


def mlp_kind(activation: str, gated: bool) -> str:
    """The spec's mlp for an HF activation name in a gated (gate/up/down) or plain (up/down) MLP."""
    act = activation.lower()
    if act in ("silu", "swish"):
        return "swiglu" if gated else "silu"
    if act.startswith("gelu"):
        return "geglu" if gated else "gelu"
    if act in ("relu", "relu2") and not gated:
        return act
    raise NoFormula(f"activation {activation!r} in a {'gated (gate/up/down)' if gated else 'plain (up/down)'} MLP: "
                    f"no formula for that activation")


def attention_bias(hf: dict, kw: dict) -> None:
    """LlamaAttention & co.: one `attention_bias` flag on q/k/v/o; `mlp_bias` on the MLP."""
    bias = bool(hf.get("attention_bias", False))
    kw.update(qkv_bias=bias, out_bias=bias, mlp_bias=bool(hf.get("mlp_bias", False)))


def deepseek_mla(hf: dict, kw: dict) -> None:
    """DeepSeek-V2/V3's attention and MoE fields (models/deepseek_v3/modeling_deepseek_v3.py), shared by every MLA
    family: attention_bias; a config without n_routed_experts is dense (no MoE fields at all); one latent serves
    per-head keys and values (n_kv_heads = n_heads); and HF's head_dim is not MLA's head width (the config classes
    overwrite it with qk_rope_head_dim for their rotary embedding), so the spec derives d_head itself."""
    attention_bias(hf, kw)
    if hf.get("n_routed_experts") is None:  # a dense DeepSeek: no MoE fields at all
        for key in ("n_experts", "n_experts_per_token", "n_shared_experts", "d_ff_expert", "n_dense_layers"):
            kw.pop(key, None)
    kw["n_kv_heads"] = kw["n_heads"]
    if kw.get("kv_lora_rank") is not None:
        kw.pop("d_head", None)
