"""The --finetune options as given, before they are checked into a ``finetune.LoraConfig``.

Light on purpose: every command that takes the options builds one, and the formulas (``finetune``, which
imports the FLOP and memory models) are imported only when a method is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import LlmcalcError
from ..records import dataclass

if TYPE_CHECKING:
    from .finetune import LoraConfig


@dataclass(frozen=True)
class FinetuneRequest:
    """The --finetune options as given (None: not given), before they are checked into a LoraConfig."""

    method: str | None = None
    rank: int | None = None
    targets: str | None = None
    base_dtype: str | None = None
    double_quant: bool = True

    def config(self) -> LoraConfig | None:
        """The LoRA set-up the options describe, or None for full training; a LoRA option without
        --finetune is refused, naming it."""
        if self.method is None:
            given = [n for n, v in (("--lora-rank", self.rank), ("--lora-targets", self.targets),
                                    ("--base-dtype", self.base_dtype)) if v is not None]
            if given or not self.double_quant:
                raise LlmcalcError(f"{', '.join(given) or '--no-double-quant'} needs --finetune lora or qlora")
            return None
        from .finetune import lora_config

        return lora_config(self.method, self.rank or 16, self.targets or "all-linear", self.base_dtype,
                           self.double_quant)
