"""What `presets` shows: every model and accelerator preset, one line each, and the published checkpoints (Hugging
Face repo ids) each model preset stands for."""

from __future__ import annotations

from ..render.tables import Column, Document, Table
from ..units import GIB, count_label, fmt_count


def document() -> Document:
    """Every model and hardware preset, one row each."""
    from ..analytic.params import count_params
    from ..spec import hardware_names, load_hardware, load_model, model_config, model_names
    from ..spec.presets import checkpoints

    rows = []
    listed = list(checkpoints().values())
    for name in model_names():
        spec = load_model(name)
        count = count_params(spec)
        rows.append({
            "kind": "model", "name": name, "model_type": spec.model_type, "architecture": spec.architecture,
            "params": count.total, "active_params": count.active_per_token,
            "summary": spec.summary(), "source": model_config(name).get("_source", ""),
            "checkpoints": [{"repo": c.repo, "variant": c.variant, "name": c.name, "config": c.config,
                             "basis": c.basis} for c in listed if c.preset == name],
        })
    for name in hardware_names():
        acc = load_hardware(name)
        dtype = "bf16" if "bf16" in acc.peak_flops else "fp16"
        rows.append({
            "kind": "hardware", "name": name,
            "summary": f"{acc.name}: {acc.peak(dtype) / 1e12:,.4g} TFLOP/s dense {dtype}, "
                       f"{acc.memory_bytes / GIB:g} GiB, {acc.memory_bandwidth / 1e12:.3g} TB/s",
            "peak_flops_per_s": acc.peak_flops, "memory_bytes": acc.memory_bytes, "source": acc.source,
        })
    table = Table(
        "presets",
        [
            Column("kind", "kind", align="left"),
            Column("name", "name", align="left"),
            Column("params", count_label("params"), fmt_count),
            Column("summary", "summary", align="left"),
        ],
        rows,
        ["pass a name to any command; a path to a Hugging Face config.json works as a model too"],
    )
    ckpt_rows = [{"repo": c.repo, "preset": c.preset, "variant": c.variant,
                  "differs": ", ".join(_differs(k, v) for k, v in c.config.items())
                  or "nothing (answers as the preset)"} for c in listed]
    published = Table(
        "published checkpoints with a preset's architecture (pass the repo id as MODEL)",
        [Column("repo", "Hugging Face repo id", align="left"), Column("preset", "preset", align="left"),
         Column("variant", "variant", align="left"), Column("differs", "config.json differs in", align="left")],
        ckpt_rows,
        ["each preset's own repo id (its _source) works too; a checkpoint whose config.json differs answers under "
         "its repo's name with those values; any other repo id: read from the local Hugging Face cache, else its "
         "config.json alone fetched where huggingface_hub and the hub are there, else pass its downloaded "
         "config.json; presets/checkpoints.json says why each shares the architecture"],
    )
    return Document("llmcalc presets", {"presets": rows}, [table, published])


def _differs(key: str, value: object) -> str:
    """One changed config key as the table shows it: a quantization_config by its method and algorithm (the whole
    block is in `--format json` and presets/checkpoints.json), any other value as it is."""
    if value is None:
        return f"{key} null"
    if isinstance(value, dict):
        named = " ".join(str(value[k]) for k in ("quant_method", "quant_algo", "format") if value.get(k))
        return f"{key} ({named})" if named else f"{key} {value}"
    return f"{key} {value}"
