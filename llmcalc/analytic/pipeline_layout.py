"""Megatron-LM's pipeline layout strings (`--pipeline-layout`, Megatron's --pipeline-model-parallel-layout).

A layout names what each pipeline stage holds, stages split by ``|``: ``E`` the embedding, ``t`` a transformer
(decoder) layer, ``m`` a multi-token-prediction layer, ``L`` the loss (the LM head); ``x*n`` repeats a symbol,
``(...)*n`` a group (stage boundaries included); commas are cosmetic; an empty stage is allowed (``E||t|L``).
Parsed and checked as Megatron-Core does (NVIDIA/Megatron-LM, megatron/core/transformer/
pipeline_parallel_layer_layout.py @d98e8a6: ``PipelineParallelLayerLayout.parse_str_to_list`` unrolls ``(...)*n``
then ``x*n`` with two regular expressions, ``__init__`` takes vpp = stages / pp and places stage i on pipeline rank
i mod pp, virtual stage i div pp, ``validate_layer_layout`` its rules; megatron/training/arguments.py derives
--virtual-pipeline-model-parallel-size from the stage count). Its docs' example (docs/user-guide/features/
pipeline_parallel_layout.md): DeepSeek-V3's 61 layers and one MTP layer on pp 16 x vpp 2 as
``Et*3|(tt|)*29,m|L``.

Stage i in the string is model stage i in llmcalc's order too (pipeline.stage_of: chunk x pp + rank), so the
layout's per-stage layer counts are the step model's stage split (steptime.stage_split).
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..errors import LlmcalcError
from ..records import dataclass

SYMBOLS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
# parse_str_to_list's two patterns, in its order: a parenthesised group times n, then one character times n
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_ONE = re.compile(r"(.)\*(\d+)")
MAX_STAGES = 4096  # far beyond any pipeline (pp x vpp): a typo such as t*100000 is refused, not unrolled
MAX_SYMBOLS = 1 << 16


@dataclass(frozen=True)
class PipelineLayout:
    """A parsed layout: each stage's symbols in model order (stage i: pipeline rank i mod pp, chunk i div pp)."""

    text: str
    stages: tuple[str, ...]
    pp: int

    @property
    def vpp(self) -> int:
        return len(self.stages) // self.pp

    @property
    def decoder_layers(self) -> tuple[int, ...]:
        """Transformer layers per model stage: the step model's stage split."""
        return tuple(stage.count("t") for stage in self.stages)

    @property
    def mtp_layers(self) -> int:
        return sum(stage.count("m") for stage in self.stages)

    @property
    def mtp_stage(self) -> int | None:
        """The model stage that holds the MTP layers (all in one, validate's rule), or None."""
        return next((i for i, stage in enumerate(self.stages) if "m" in stage), None)

    def describe(self) -> str:
        """One line: each stage's content, runs of equal stages folded (as Megatron's pretty_repr folds ranks)."""
        out: list[str] = []
        i = 0
        while i < len(self.stages):
            j = i
            while j + 1 < len(self.stages) and self.stages[j + 1] == self.stages[i]:
                j += 1
            what = _stage_words(self.stages[i])
            out.append(f"{'stage' if i == j else 'stages'} {i}{'' if i == j else f'-{j}'} {what}")
            i = j + 1
        return "; ".join(out)


def _stage_words(stage: str) -> str:
    parts = [("E", "embedding"), ("t", "layer"), ("m", "MTP layer"), ("L", "loss")]
    words = []
    for symbol, name in parts:
        n = stage.count(symbol)
        if n:
            words.append(name if symbol in "EL" else f"{n} {name}{'s' if n > 1 else ''}")
    return " + ".join(words) or "(empty)"


def unroll(text: str) -> list[str]:
    """The stages of a layout string, as Megatron's parse_str_to_list reads it: commas dropped, ``(...)*n`` then
    ``x*n`` unrolled, split at ``|``; each stage's symbols checked (one line naming the bad one)."""
    flat = text.replace(",", "").replace(" ", "")
    for pattern in (_GROUP, _ONE):
        total = 0

        def repeat(match: re.Match[str]) -> str:
            nonlocal total
            n = int(match.group(2))
            total += len(match.group(1)) * n
            if total > MAX_SYMBOLS:
                raise LlmcalcError(f"--pipeline-layout {text!r} unrolls to more than {MAX_SYMBOLS:,} symbols; "
                                   f"check its repeat counts")
            return match.group(1) * n
        flat = pattern.sub(repeat, flat)
    stages = flat.split("|")
    if len(stages) > MAX_STAGES:
        raise LlmcalcError(f"--pipeline-layout {text!r} has {len(stages):,} stages; at most {MAX_STAGES:,}")
    for stage in stages:
        bad = sorted(set(stage) - set(SYMBOLS))
        if bad:
            raise LlmcalcError(f"--pipeline-layout {text!r}: unknown symbol {bad[0]!r} in stage {stage!r}; use E "
                               f"(embedding), t (transformer layer), m (MTP layer), L (loss), | between stages, x*n "
                               f"and (...)*n to repeat")
    return stages


@lru_cache(maxsize=256)
def parse(text: str, pp: int) -> PipelineLayout:
    """`text` on `pp` pipeline ranks: the stage count must be a multiple of pp (vpp = stages / pp), the embedding
    first and once, the loss last and once (Megatron's rules)."""
    stages = tuple(unroll(text))
    if len(stages) % pp:
        raise LlmcalcError(f"--pipeline-layout {text!r} has {len(stages)} stages: not a multiple of --pp {pp} (stages "
                           f"= pp x vpp)")
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1:
        raise LlmcalcError(f"--pipeline-layout {text!r}: the embedding E must come first, once")
    if not flat.endswith("L") or flat.count("L") != 1:
        raise LlmcalcError(f"--pipeline-layout {text!r}: the loss L must come last, once")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise LlmcalcError(f"--pipeline-layout {text!r}: MTP layers (m) come after every transformer layer (t)")
    return PipelineLayout(text=text, stages=stages, pp=pp)


def check_layout(layout: PipelineLayout, n_layers: int, mtp_layers: int | None) -> None:
    """The layout against the model (validate_layer_layout): as many t as the model has layers, as many m as
    --mtp-layers (if given), all MTP layers in one stage, on the last chunk of its rank."""
    text = layout.text
    t = sum(layout.decoder_layers)
    if t != n_layers:
        raise LlmcalcError(f"--pipeline-layout {text!r} places {t} transformer layers (t); the model has {n_layers}")
    m = layout.mtp_layers
    if mtp_layers is not None and m != mtp_layers:
        raise LlmcalcError(f"--pipeline-layout {text!r} places {m} MTP layers (m); --mtp-layers is {mtp_layers}")
    where = [i for i, stage in enumerate(layout.stages) if "m" in stage]
    if len(where) > 1:
        raise LlmcalcError(f"--pipeline-layout {text!r}: every MTP layer in one stage (Megatron's rule); found in "
                           f"stages {', '.join(map(str, where))}")
    if where:
        stage, pp, vpp = where[0], layout.pp, layout.vpp  # stage i: rank i mod pp, chunk i div pp
        if stage // pp != vpp - 1:
            raise LlmcalcError(f"--pipeline-layout {text!r}: the MTP layers must be in the last virtual stage of "
                               f"their rank (Megatron's rule); stage {stage} is chunk {stage // pp} of {vpp}")


def layout_options(options: dict) -> dict:
    """`train`'s step options with --pipeline-layout as Megatron reads it (arguments.py): --pp given (2 or more),
    --vpp the stage count / pp and --mtp-layers the string's m count where not given (where given, the step model's
    checks hold them to the string: steptime._check_pipeline_layout)."""
    text = options.get("pipeline_layout")
    if text is None:
        return options
    pp = options.get("pp") or 1
    if pp < 2:
        raise LlmcalcError("--pipeline-layout places layers on pipeline stages: give --pp (2 or more; the string's "
                           "stages are pp x vpp)")
    layout = parse(text, pp)
    out = dict(options)
    if out.get("vpp") is None and layout.vpp > 1:
        out["vpp"] = layout.vpp
    if out.get("mtp_layers") is None and layout.mtp_layers:
        out["mtp_layers"] = layout.mtp_layers
    return out


def rank_layers(n_layers: int, pp: int, first: int = 0, last: int = 0, text: str = "") -> tuple[int, ...] | None:
    """Decoder layers per pipeline rank (all its chunks) where the layout fixes them, else None (the even split):
    --pipeline-layout's stages summed per rank (stage i on rank i mod pp), or --first-stage-layers /
    --last-stage-layers on the first / last rank and the rest shared evenly by the others (Megatron-Core's
    get_transformer_layer_offset; the step model's stage_split, per rank). What training memory sizes per rank."""
    if text:
        layout = parse(text, pp)
        return tuple(sum(layout.decoder_layers[i] for i in range(r, len(layout.stages), pp)) for r in range(pp))
    if not (first or last) or pp < 2:
        return None
    middle_ranks = pp - bool(first) - bool(last)
    middle = (n_layers - first - last) // middle_ranks if middle_ranks else 0
    return tuple(first if r == 0 and first else last if r == pp - 1 and last else middle for r in range(pp))
