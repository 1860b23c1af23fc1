"""What `layout` shows: the parallel layouts that fit, ranked by predicted throughput, and why the others lose."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..render.tables import Column, Document, Table
from ..units import GIB, plural, si

if TYPE_CHECKING:
    from ..analytic.step.layout import Layout
    from ..analytic.step.search import LayoutSearch


def overlap_rule(lay: Layout | None = None) -> str:
    """The overlap rule the prediction used, in one line (`lay`: the layout's settings; None: the defaults)."""
    tp_overlap = lay is not None and lay.tp_overlap
    ep_overlap = lay is not None and lay.ep_overlap
    cp_comm = "p2p" if lay is None else lay.cp_comm
    tp = ("TP all-gathers/reduce-scatters under their GEMMs split in chunks (--tp-overlap: TransformerEngine's "
          "userbuffers), the GEMMs beside the pipelined and bulk overlaps on the SMs the communication leaves, the "
          "last chunk's reduce-scatter and any excess exposed" if tp_overlap else "TP collectives exposed")
    ep = ("EP all-to-alls partly under another micro-batch's compute (--ep-overlap)" if ep_overlap
          else "EP all-to-alls exposed")
    cp = {"p2p": "CP K/V ring steps each under the previous step's attention block",
          "all-gather": "CP K/V all-gather exposed", "a2a": "CP all-to-alls exposed",
          "a2a+p2p": "CP all-to-alls exposed, then K/V ring steps each under the previous step's block"}[cp_comm]
    dp = ("DP reduction hidden behind the last micro-batch's backward, the weight all-gather behind the first "
          "forward, the last bucket exposed" if lay is None or lay.dp_overlap else "DP reduction after the backward")
    return f"overlap rule: {tp}; {ep}; {cp}; PP sends delay the next stage; {dp}"


def _pct(v: float) -> str:
    return f"{v * 100:.1f} %"


def _say_no_losers(tables: list[Table], fit: int) -> None:
    """Nothing to tabulate in the losers' table: say why in one note under the first table, not a header with no
    rows."""
    tables[1].for_people = False
    tables[0].notes.append("why the others lose: " + (
        "no other layout fits" if fit <= 1 else "no other layout loses more than 5 % of its step to a kind of loss "
        "the best does not suffer, nor to recomputation"))


def document(search: LayoutSearch, top: int = 10, recompute: str | None = None,
             reproduce: dict | None = None) -> Document:
    """`layout`'s answer: the `top` layouts that fit and why the others lose (`recompute`: the one mode tried, if
    given; `reproduce`: the train, memory and report command lines of the best layout, cli.reproduce)."""
    doc = layout_document(search.spec.name, search.gpu, search.n_gpus, search.seq_len,
                          global_batch=search.global_batch, ranked=search.ranked, losers=search.losers,
                          counts=search.counts, top=top, recompute=recompute, recipe=search.recipe,
                          optimizer=search.optimizer, reserve_gib=search.reserve_gib)
    if search.knobs:  # the step model's search (the measured one varies the degrees, recomputation and ZeRO only)
        doc.tables[0].notes[1:1] = list(search.knobs)
        doc.data["knobs"] = list(search.knobs)
    sources = getattr(search.ranked[0][0], "measured_from", None) if search.ranked else None
    if sources is not None:  # a model transformers measured (analytic/measured_step.py)
        doc.data.update(method="transformers", measured_from=dict(sources))
        notes = doc.tables[0].notes
        notes[1] = (f"memory: `llmcalc memory`'s per-GPU model of what transformers measured ({search.recipe} + "
                    f"{search.optimizer}; per pipeline stage its layers' tensors and saved activations), no "
                    "recomputation (the measured forward recomputes nothing), with ZeRO-1, else ZeRO-3 (FSDP)")
        notes[3:3] = [f"measured by transformers, {k}: {text}" for k, text in sources.items()]
    if reproduce is not None:
        doc.data["reproduce"] = {"train": reproduce["train"], "memory": reproduce["memory"],
                                 "report": reproduce["report"]}
        doc.tables[0].notes += [f"reproduce #1: {reproduce['train']}", f"reproduce #1: {reproduce['memory']}",
                                f"reproduce #1: {reproduce['report'] or reproduce['report_why']}"]
    return _mfu_conventions(doc, search)


def _mfu_conventions(doc: Document, search: LayoutSearch) -> Document:
    """MFU (%) is against the --dtype peak; where the recipe's GEMM dtype or bf16 give another convention, each
    layout's JSON row gets `mfu_vs_<dtype>_peak` (and `mfu_vs_recipe_peak`), and a note says how they relate."""
    from ..analytic.memory import RECIPES
    from ..analytic.precision import gemm_peak, mfu_conventions

    if not search.ranked:
        return doc
    device = search.ranked[0][0].device
    own = gemm_peak(device.accelerator, RECIPES[search.recipe].gemm_dtype, device.fp4_peak)
    for row, (pred, _) in zip(doc.data["layouts"], search.ranked, strict=False):
        by_peak = mfu_conventions(pred.model_flops_per_gpu, device.accelerator, device.dtype, own)
        if len(by_peak) > 1:
            row.update({f"mfu_vs_{dtype}_peak": value for dtype, value in by_peak.items()})
            if own is not None:
                row["mfu_vs_recipe_peak"] = by_peak[own[0]]
    ratios = mfu_conventions(1.0, device.accelerator, device.dtype, own)
    if len(ratios) > 1:
        doc.tables[0].notes.append(
            f"MFU (%) against the dense {device.dtype} peak ({device.peak / 1e12:,.6g} TFLOP/s); against the "
            + ", ".join(f"dense {dtype} peak x {value / ratios[device.dtype]:.4g}" for dtype, value in ratios.items()
                        if dtype != device.dtype)
            + f" ({search.recipe}'s GEMMs run in {own[0] if own else 'an unlisted dtype'}; JSON: mfu_vs_<dtype>_peak)")
    return doc


def _memory_note(recipe: str, optimizer: str, recompute: str | None, reserve_gib: float) -> str:
    """The note saying what a layout's memory is checked against (--reserve-gib included) and with what."""
    return (f"memory: `llmcalc memory`'s per-GPU model ({recipe} + {optimizer}, flash attention, sequence "
            "parallel) against the memory the runtime reports"
            + (f" less {reserve_gib:g} GiB kept free (--reserve-gib)" if reserve_gib else "") + "; "
            + (f"recompute {recompute} (given), with ZeRO-1, else ZeRO-3 (FSDP)" if recompute
               else "the least recomputation that fits is tried first with ZeRO-1, then with ZeRO-3 (FSDP)"))


def _columns(rows: list[dict]) -> list[Column]:
    """The best layouts' columns: etp only where experts fold, the expert dispatcher and EP overlap, the TP overlap,
    the first and last pipeline ranks' layers and the HSDP shard group only where a listed layout has them (the search
    chose them, or they were given)."""
    searched_ep = any(row["ep_dispatcher"] != "alltoall" or row["ep_overlap"] for row in rows)  # shown where chosen
    return [Column("rank", "#"), Column("tp", "tp"), Column("cp", "cp"), Column("pp", "pp"), Column("vpp", "vpp"),
            Column("dp", "dp"), Column("ep", "ep"),
            Column("etp", "etp", show=any(row["etp"] != row["tp"] for row in rows)),  # only where experts fold
            Column("ep_dispatcher", "EP dispatch", align="left", show=searched_ep),
            Column("ep_overlap", "EP overlap", lambda v: "on" if v else "off", show=searched_ep),
            Column("tp_overlap", "TP overlap", lambda v: "on" if v else "off",
                   show=any(row["tp_overlap"] for row in rows)),
            Column("stage_layers", "first/last stage layers", align="left",
                   show=any(row["stage_layers"] for row in rows)),  # an uneven pipeline split, where listed
            Column("micro_batch", "micro-batch"),
            Column("recompute", "recompute", align="left"),
            Column("zero", "ZeRO"),
            Column("dp_shard", "HSDP shard",
                   show=any(row["dp_shard"] for row in rows)),  # shown where chosen
            Column("memory_gib", "memory (GiB)", lambda v: f"{v:.1f}"),
            Column("step_seconds", "step (s)", lambda v: f"{v:.4g}"), Column("mfu", "MFU (%)", _pct),
            Column("tokens_per_second", "tokens/s", lambda v: si(v).strip()),
            Column("biggest_loss", "biggest loss (share of step)", align="left")]


def layout_document(model: str, gpu: str, n_gpus: int, seq_len: int, global_batch: int, ranked: list,
                    losers: list, counts: dict, top: int, recompute: str | None = None, recipe: str = "bf16-mixed",
                    optimizer: str = "adamw", reserve_gib: float = 0.0) -> Document:
    rows = []
    for i, (pred, mem) in enumerate(ranked[:top], 1):
        lay = pred.layout
        worst = max(((k, v) for k, v in pred.breakdown.items() if k != "compute"), key=lambda kv: kv[1])
        rows.append({"rank": i, "tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "vpp": lay.vpp, "dp": lay.dp, "ep": lay.ep,
                     "etp": lay.expert_tp, "ep_dispatcher": lay.ep_dispatcher, "ep_overlap": lay.ep_overlap,
                     "tp_overlap": lay.tp_overlap and lay.tp > 1, "first_stage_layers": lay.first_stage_layers or None,
                     "last_stage_layers": lay.last_stage_layers or None,
                     "stage_layers": (f"{lay.first_stage_layers or 'even'}/{lay.last_stage_layers or 'even'}"
                                      if lay.first_stage_layers or lay.last_stage_layers else None),
                     "micro_batch": lay.micro_batch,
                     "recompute": pred.recompute, "zero": lay.zero,
                     "dp_shard": lay.dp_shard or None,
                     "schedule": lay.schedule, "memory_gib": mem / GIB, "step_seconds": pred.step_seconds,
                     "mfu": pred.mfu, "tokens_per_second": pred.tokens_per_second,
                     "biggest_loss": f"{worst[0]} {_pct(worst[1] / pred.step_seconds)}",
                     "breakdown_seconds": dict(pred.breakdown), "assumptions": dict(pred.assumptions)})
    best = ranked[0][0].tokens_per_second if ranked else None
    lose_rows = [{"layout": detail, "why": reason,
                  "vs_best": None if pred is None or best is None else pred.tokens_per_second / best - 1}
                 for reason, pred, detail in losers]
    cols = _columns(rows)
    bounded = counts.get("bounded", 0)
    evaluated = " evaluated" if bounded else ""
    searched = (f"searched {plural(counts['searched'], 'layout')}: {counts['fit']:,} fit, {counts['oom']:,} do not "
                f"fit in memory, {counts['invalid']:,} contradict the model (heads, layers, batch)")
    if bounded:  # a pruned search (search.search_layouts): the counts are of the layouts it evaluated
        searched = (f"searched {counts['searched']:,} layouts: {counts['fit'] + counts['oom']:,} evaluated "
                    f"({counts['fit']:,} fit, {counts['oom']:,} do not fit in memory), {bounded:,} bounded (not "
                    f"evaluated: a lower bound of their step cannot beat the {max(top, 10)}th best; --exhaustive "
                    f"evaluates them), {counts['invalid']:,} contradict the model (heads, layers, batch)")
    tables = [Table(f"best layouts that fit, by predicted throughput (top {min(top, len(rows))} of "
                    f"{counts['fit']:,}{evaluated} that fit)", cols, rows,
                    [searched,
                     _memory_note(recipe, optimizer, recompute, reserve_gib),
                     overlap_rule(ranked[0][0].layout if ranked else None)]
                    + ([f"assumed: {ranked[0][0].notes[-1].removeprefix('assumed: ')}"] if ranked else [])),
              Table("why the others lose", [Column("layout", "layout", align="left"),
                                            Column("why", "why", align="left"),
                                            Column("vs_best", "throughput vs best (%)",
                                                   lambda v: f"{v * 100:+.1f} %")], lose_rows,
                    [f"of the {counts['fit'] + counts['oom']:,} layouts evaluated: those that can win, and for each "
                     "kind of loss the first that fits of the layouts left whose shape makes it largest (largest "
                     "bubble fraction (pp - 1) / (vpp x micro-batches), tp, cp, dp, pp x vpp); the bounded ones are "
                     "not read (--exhaustive: every layout)"] if bounded else [])]
    if not lose_rows:
        _say_no_losers(tables, counts["fit"])
    data = {"model": model, "gpu": gpu, "n_gpus": n_gpus, "seq_len": seq_len, "global_batch": global_batch,
            "reserve_gib": reserve_gib, "layouts": rows, "losers": lose_rows, "counts": counts}
    return Document(f"{model}: layouts for {n_gpus:,} x {gpu}, seq {seq_len}, global batch "
                    f"{plural(global_batch, 'sequence')}", data, tables)
