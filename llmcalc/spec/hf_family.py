"""What ``hf`` and ``hf_ssm`` both need: the ``Family`` record of one HF model_type, and the MLP kind
an activation name means. Neither imports the other's tables from here, so there is no import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .draft import SpecError


@dataclass(frozen=True)
class Family:
    """What one HF model_type leaves implicit. `source` names the modelling file it mirrors."""

    source: str
    implicit: dict  # SpecDraft fields fixed by the modelling code
    defaults: dict = field(default_factory=dict)  # HF config-class defaults for absent keys
    derive: Callable[[dict, dict], None] | None = None  # (hf config, spec kwargs) -> fills kwargs
    gated: bool = True  # FFN with gate/up/down (SwiGLU/GeGLU) rather than up/down
    keep_null: tuple[str, ...] = ()  # keys whose explicit null means something else than "absent"


def mlp_kind(activation: str, gated: bool) -> str:
    """The spec's mlp for an HF activation name in a gated (gate/up/down) or plain (up/down) MLP."""
    act = activation.lower()
    if act in ("silu", "swish"):
        return "swiglu" if gated else "silu"
    if act.startswith("gelu"):
        return "geglu" if gated else "gelu"
    if act in ("relu", "relu2") and not gated:
        return act
    raise SpecError(f"activation {activation!r} is not supported for a {'gated' if gated else 'plain'} MLP")
