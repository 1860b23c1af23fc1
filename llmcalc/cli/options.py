"""The options commands share, each defined once: one type, one default and one help text wherever it appears.

Groups (decorators): ``sequence_options`` (--seq-len, --causal, --recompute), ``finetune_options`` (handed to
the command as one ``FinetuneRequest``), ``expert_options`` (--ep, --etp), ``global_batch_options``,
``step_options`` (train: the layout and what the step-time model needs; the command passes on only what was
typed), ``serving_options`` (infer, serve) and ``scenario_options`` (compare, report). Single options are
decorators (``format_option``, ``zero_option``, ``attention_option``, ...) or, where a command words its role,
functions returning one (``gpu_option``, ``n_gpus_option``, ``recompute_option``). Where an option's default or
help differs between commands its meaning does (tests/test_cli.py lists those, each with its reason).

And the option-presence checks that need click's context: ``given`` and ``refuse_unused``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import click
from click.core import ParameterSource

from ..validate import (
    DEFAULT_GOODPUT,
    DEFAULT_SEQ_LEN,
    DEFAULT_ZERO,
    GPU_MEMORY,
    MAX_BATCH,
    MAX_BATCH_TOKENS,
    MAX_GPUS,
    MAX_PARAMS,
    MAX_SEQ_LEN,
    MAX_TFLOPS,
    MAX_TOKENS,
    MAX_USD_PER_GPU_HOUR,
    RANK_ORDER,
)
from ..vocabulary import (
    ATTENTION_KERNELS,
    BASE_DTYPES,
    CP_COMMS,
    EP_DISPATCHERS,
    FINETUNE_METHODS,
    FORMATS,
    OPTIMIZER_NAMES,
    RECIPE_NAMES,
    RECOMPUTE_MODES,
    RECOMPUTE_MODULES,
    SCHEDULES,
    STORAGE_DTYPES,
)
from .types import CardMemory, Choice, Count, CountList, DType, Fraction, Length, ModelName, Name, Number, RankOrder

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]

LENGTH = Length(MAX_SEQ_LEN)
POSITIVE_INT = Count(whole=True, maximum=MAX_BATCH)
GPUS = Count(whole=True, maximum=MAX_GPUS)
DEGREE = Count(whole=True, maximum=MAX_GPUS)
TOKENS = Count(maximum=MAX_TOKENS)
PARAMS = Count(maximum=MAX_PARAMS)
QUANTITY = Count()
MFU = Fraction()
PRICE = Number(maximum=MAX_USD_PER_GPU_HOUR, minimum=1e-6)
TFLOPS = Number(maximum=MAX_TFLOPS)
NAME = Name()
CARD_MEMORY = CardMemory()
MODEL_NAME = ModelName()
ATTENTION = Choice(["flash", "eager"], aliases={"sdpa": "flash"})

SEQ_HELP = f"Tokens per training sequence (4k = 4,096); the same default, {DEFAULT_SEQ_LEN:,}, in every command."
ATTENTION_HELP = "flash (sdpa: no S² buffers) or eager (keeps the B·H·S² softmax); sdpa is accepted for flash."
CAUSAL_HELP = "Halve the attention S² terms (Megatron-LM/NeMo convention). Default: full S²."
RECOMPUTE_HELP = "Activation recomputation: none, selective (attention) or full (one checkpoint per block)."
MICRO_BATCH_HELP = "Sequences per GPU per micro-batch (--batch-size is the old name)."
PRICE_HELP = "Price per GPU-hour (default: the preset's, if any)."
TOKENS_HELP = "Training tokens (e.g. 2T, 15t)."


def apply(func: F, decorators: Sequence[Decorator]) -> F:
    """`decorators` applied so that the first one listed is the first option in --help."""
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


# --- single options --------------------------------------------------------------------------------------


def format_option(func: F) -> F:
    return click.option(
        "--format", "fmt", type=Choice(list(FORMATS)), default="table", show_default=True,
        help="table for terminals; markdown, csv (the main table, raw numbers) or json (everything).",
    )(func)


def model_argument(func: F) -> F:
    return click.argument("model", type=MODEL_NAME)(func)


def models_argument(func: F) -> F:
    return click.argument("models", nargs=-1, required=True, type=MODEL_NAME)(func)


def _defaulted(default: Any) -> dict[str, Any]:
    """click's default and show_default for a default that may be none (click 8.2+ takes an explicit
    default=None as a value, and a required option with one as given)."""
    return {} if default is None else {"default": default, "show_default": True}




def _gpu_memory(ctx: click.Context, param: click.Parameter, value: float | None) -> None:
    """--gpu-memory (eager: before --gpu): kept for --gpu's callback."""
    if value is not None:
        ctx.meta["gpu_memory"] = value


def _gpu(required: bool) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        memory = ctx.meta.get("gpu_memory")
        if memory is None:
            if value is None and required:
                raise click.MissingParameter(ctx=ctx, param=param)
            return value
        if ctx.get_parameter_source("gpu") in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            raise click.UsageError("give --gpu (a preset) or --gpu-memory (a GPU of that memory), not both")
        return f"{GPU_MEMORY}{memory:.0f}"
    return callback


def gpu_option(help: str = "Accelerator preset (see `llmcalc presets`).", required: bool = False,
               default: str | None = None) -> Decorator:
    """--gpu, and --gpu-memory for any card of that memory (what `memory` needs; commands that need the GPU's speed
    say in one line which presets have that memory)."""
    def decorate(func: F) -> F:
        return apply(func, [
            click.option("--gpu", type=NAME, callback=_gpu(required), help=help + (" [required]" if required else ""),
                         **_defaulted(default)),
            click.option("--gpu-memory", type=CARD_MEMORY, is_eager=True, expose_value=False, callback=_gpu_memory,
                         help="Instead of --gpu: any GPU of this memory (24GB, 80GB; a card's GB = GiB), for memory "
                              "alone; speed needs a preset."),
        ])
    return decorate


def n_gpus_option(help: str = "GPUs in all (1k = 1,000).", required: bool = False,
                  default: int | None = None) -> Decorator:
    return click.option("--n-gpus", type=GPUS, required=required, help=help, **_defaulted(default))


def seq_len_option(func: F) -> F:
    return click.option("--seq-len", type=LENGTH, default=DEFAULT_SEQ_LEN, show_default=True, help=SEQ_HELP)(func)


def causal_option(func: F) -> F:
    return click.option("--causal", is_flag=True, help=CAUSAL_HELP)(func)


def recompute_option(default: str | None = "none", help: str = RECOMPUTE_HELP,
                     choices: tuple[str, ...] = RECOMPUTE_MODES) -> Decorator:
    return click.option("--recompute", type=Choice(list(choices)), help=help, **_defaulted(default))


def micro_batch_option(func: F) -> F:
    return click.option("--micro-batch", "--batch-size", "micro_batch", type=POSITIVE_INT, default=1,
                        show_default=True, help=MICRO_BATCH_HELP)(func)


def attention_option(func: F) -> F:
    return click.option("--attention", type=ATTENTION, default="flash", show_default=True, help=ATTENTION_HELP)(func)


def recipe_option(func: F) -> F:
    return click.option("--recipe", type=Choice(list(RECIPE_NAMES)), default="bf16-mixed", show_default=True,
                        help="Precision recipe (weights, gradients, master copy, optimizer states, activations; the "
                             "step model's GEMM dtype: fp8*, mxfp8 FP8, nvfp4 FP4).")(func)


def optimizer_option(func: F) -> F:
    return click.option("--optimizer", type=Choice(list(OPTIMIZER_NAMES)), default="adamw", show_default=True,
                        help="Optimizer whose states are counted (and whose step the step model times).")(func)


def peak_dtype_option(func: F) -> F:
    return click.option("--dtype", type=DType(), default="bf16", show_default=True,
                        help="Which dense peak of the GPU MFU is quoted against (bf16, fp16, fp8, tf32, fp32; bfloat16 "
                             "= bf16); where a step is timed or memory sized without --recipe, also the recipe "
                             "(fp8: Transformer Engine's default FP8 recipe for the GPU).")(func)


def recipe_dtype_option(func: F) -> F:
    """memory's --dtype: no peak to quote, only the recipe it names (analytic.precision.recipe_for_dtype)."""
    return click.option("--dtype", type=DType(), default=None,
                        help="Instead of --recipe: the run's precision (bf16, fp16, fp32, tf32; fp8 = Transformer "
                             "Engine's default FP8 recipe on --gpu: fp8 delayed scaling before Blackwell, mxfp8 "
                             "on it).")(func)


def price_option(func: F) -> F:
    return click.option("--usd-per-gpu-hour", type=PRICE, default=None, help=PRICE_HELP)(func)


GOODPUT = Fraction("of the wall-clock spent training", minimum=0.0)
GOODPUT_HELP = ("Share of the run's wall-clock spent training, in (0, 1] (restarts, failures and checkpoints take the "
                "rest; Llama 3 reports > 90 % on 16K H100): GPU-hours, days, cost and energy = compute / goodput; 1 "
                "counts compute alone.")


def goodput_option(func: F) -> F:
    """--goodput: the share of a training run's wall-clock spent training (wall = compute / goodput)."""
    return click.option("--goodput", type=GOODPUT, default=DEFAULT_GOODPUT, show_default=True,
                        help=GOODPUT_HELP)(func)


def _keep_goodput(ctx: click.Context, param: click.Parameter, value: float) -> None:
    ctx.meta["goodput"] = value


def scenario_goodput_option(func: F) -> F:
    """compare's and report's --goodput, kept in ctx.meta["goodput"] for their scenario (cli/compare.py)."""
    return click.option("--goodput", type=GOODPUT, default=DEFAULT_GOODPUT, show_default=True, expose_value=False,
                        callback=_keep_goodput, help=GOODPUT_HELP)(func)


def zero_option(func: F) -> F:
    return click.option("--zero", type=click.IntRange(0, 3), default=DEFAULT_ZERO, show_default=True,
                        help="ZeRO stage over data parallelism: 0-3 (3 = FSDP).")(func)


def tp_option(func: F) -> F:
    return click.option("--tp", type=DEGREE, default=1, show_default=True, help="Tensor-parallel degree.")(func)


def pp_option(func: F) -> F:
    return click.option("--pp", type=DEGREE, default=1, show_default=True, help="Pipeline-parallel degree.")(func)


def reserve_gib_option(func: F) -> F:
    return click.option("--reserve-gib", type=Number(zero=True, maximum=1e6), default=0.0, show_default=True,
                        help="With --gpu: memory to keep free on the GPU (CUDA context, fragmentation).")(func)


def device_option(func: F) -> F:
    return click.option("--device", type=Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                        help="Where a real run executes: auto (cuda if present), cpu or cuda.")(func)


def tp_overlap_option(func: F) -> F:
    return click.option("--tp-overlap/--no-tp-overlap", default=False, show_default=True,
                        help="Run TP all-gather/reduce-scatter beside the GEMMs (TransformerEngine's userbuffers, at "
                             "the SMs they hold); `layout` tries both where tp > 1 unless given.")(func)


def global_batch_options(func: F) -> F:
    return apply(func, [
        click.option("--global-batch", type=POSITIVE_INT, default=None,
                     help="Sequences per optimizer step: predicts step time and MFU."),
        click.option("--global-batch-tokens", type=Count(maximum=MAX_BATCH_TOKENS), default=None,
                     help=f"Instead: tokens per step (e.g. 16Mi = 2,048 x 8k; a count that is no multiple of "
                          f"--seq-len is rounded to the nearest, with a note; at most {MAX_BATCH:,} sequences)."),
    ])


# --- groups ---------------------------------------------------------------------------------------------


def sequence_options(func: F) -> F:
    """--seq-len, --causal, --recompute: what one step's FLOPs depend on."""
    return apply(func, [seq_len_option, causal_option, recompute_option()])


def finetune_options(func: F) -> F:
    """The LoRA/QLoRA options, handed to the command as one `finetune` (analytic.finetune.FinetuneRequest)."""

    @functools.wraps(func)  # keeps what click reads: the name, the docstring, the options declared so far
    def command(*args: Any, **kwargs: Any) -> Any:
        from ..analytic.finetune_request import FinetuneRequest

        kwargs["finetune"] = FinetuneRequest(kwargs.pop("finetune"), kwargs.pop("lora_rank"),
                                             kwargs.pop("lora_targets"), kwargs.pop("base_dtype"),
                                             kwargs.pop("double_quant"))
        return func(*args, **kwargs)

    return cast(F, apply(command, [
        click.option("--finetune", type=click.Choice(list(FINETUNE_METHODS)), default=None,
                     help="LoRA or QLoRA: frozen base, trainable low-rank adapters (default: full training)."),
        click.option("--lora-rank", type=POSITIVE_INT, default=None, help="LoRA rank r (default 16)."),
        click.option("--lora-targets", default=None,
                     help="all-linear (default) or a comma list of q,k,v,o,gate,up,down."),
        click.option("--base-dtype", type=click.Choice(list(BASE_DTYPES)), default=None,
                     help="Frozen base weights (default: bf16 for lora, nf4 for qlora)."),
        click.option("--double-quant/--no-double-quant", default=True, show_default=True,
                     help="nf4/fp4: quantise the block scales again (bitsandbytes compress_statistics)."),
    ]))


def expert_options(func: F) -> F:
    """--ep, --etp: routed experts split over GPUs (MoE parallel folding)."""
    return apply(func, [
        click.option("--ep", type=DEGREE, default=1, show_default=True,
                     help="Expert-parallel degree (MoE): routed experts split over ep GPUs."),
        click.option("--etp", type=DEGREE, default=None,
                     help="Expert tensor-parallel degree (MoE; default = tp): each routed expert split over etp GPUs; "
                          "ep x etp fold over the tp x dp GPUs."),
    ])


def sequence_parallel_option(func: F) -> F:
    return click.option("--sequence-parallel/--no-sequence-parallel", default=True, show_default=True,
                        help="With --tp > 1: shard the norm and dropout activations over the tensor-parallel "
                             "group.")(func)


def parallel_options(func: F) -> F:
    """The layout degrees every training command shares (analytic.parallel.Parallel): --tp, --pp, --ep, --etp,
    --zero and sequence parallelism, each with the one default of llmcalc."""
    return apply(func, [tp_option, pp_option, expert_options, zero_option, sequence_parallel_option])


def cp_option(func: F) -> F:
    return click.option("--cp", type=DEGREE, default=1, show_default=True, help="Context-parallel degree.")(func)


def vpp_option(func: F) -> F:
    return click.option("--vpp", type=DEGREE, default=1, show_default=True,
                        help="Virtual stages (model chunks) per pipeline rank (interleaved).")(func)


def stage_layers_options(func: F) -> F:
    """Where the pipeline's layers sit when not split evenly: the first or last rank's, or Megatron's layout string."""
    return apply(func, [
        click.option("--first-stage-layers", type=POSITIVE_INT, default=None,
                     help="Layers on the first pipeline rank, over its --vpp chunks (Megatron's "
                          "--decoder-first-pipeline-num-layers; the rest split evenly)."),
        click.option("--last-stage-layers", type=POSITIVE_INT, default=None,
                     help="Layers on the last pipeline rank (Megatron's --decoder-last-pipeline-num-layers)."),
        click.option("--pipeline-layout", default=None,
                     help="Megatron's --pipeline-model-parallel-layout: each stage's layers, stages split by |, E "
                          "embedding, t layer, m MTP layer, L loss, x*n and (...)*n repeat (e.g. "
                          "'Et*3|(tt|)*29,m|L'); stages = pp x vpp (--vpp follows from it)."),
    ])


LAYOUT_OPTIONS = ("global_batch", "global_batch_tokens", "micro_batch", "tp", "cp", "pp", "vpp", "ep", "etp", "zero",
                  "sequence_parallel", "first_stage_layers", "last_stage_layers", "pipeline_layout", "reserve_gib")


def layout_options(func: F) -> F:
    """One layout everywhere (issue 41): the options every command that takes a training layout shares (train, memory,
    layout, compare, report), each defined once here: the global batch, micro-batch, the degrees (tp, cp, pp, vpp,
    ep, etp), ZeRO, sequence parallelism, the pipeline's stage layers and the memory kept free on the GPU
    (``LAYOUT_OPTIONS``, their parameter names). --recompute is shared too (``recompute_option``), its default the
    command's: none, or for `layout` the least that fits."""
    return apply(func, [global_batch_options, micro_batch_option, parallel_options, cp_option, vpp_option,
                        stage_layers_options, reserve_gib_option])


def step_options(func: F) -> F:
    """The parallel layout and what the step-time model needs (train): every option optional; the command
    passes on only those typed (``typed``), the step model's defaults are the same."""
    return apply(func, [
        layout_options,
        click.option("--schedule", type=click.Choice(list(SCHEDULES)), default=None,
                     help="Pipeline schedule (default 1f1b; interleaved with --vpp)."),
        click.option("--dp-overlap/--no-dp-overlap", default=True, show_default=True,
                     help="Overlap DP reduction with backward."),
        tp_overlap_option,
        attention_option,
        step_model_options,
        click.option("--cp-a2a-size", type=POSITIVE_INT, default=None,
                     help="With --cp-comm a2a+p2p: ranks of the inner all-to-all level (Megatron's "
                          "--hierarchical-context-parallel-sizes A P); the ring runs over cp / A."),
        click.option("--fp8-param-gather", is_flag=True, default=None,
                     help="ZeRO / FSDP all-gather the FP8 weights, 1 byte each (Megatron's --fp8-param-gather)."),
        click.option("--tokens-per-second", type=QUANTITY, default=None,
                     help="Cluster-wide throughput of a past run: its achieved MFU/HFU."),
    ])


def step_model_options(func: F) -> F:
    """What the step-time model runs besides the layout (train with --global-batch, layout): the recipe and the
    optimizer, rank order, CP and EP communication, partial recomputation, MTP layers, the attention kernel."""
    return apply(func, [
        recipe_option,
        optimizer_option,
        click.option("--rank-order", "order", type=RankOrder(), default=RANK_ORDER, show_default=True,
                     help="How ranks are laid out, innermost first "
                          "(Megatron-Core's default; Llama 3: tp-cp-ep-pp-dp)."),
        click.option("--cp-comm", type=Choice(list(CP_COMMS)), default="p2p", show_default=True,
                     help="Context parallelism: p2p ring (overlapped), all-gather of K/V, a2a over heads, or "
                          "a2a+p2p (hierarchical, with --cp-a2a-size)."),
        click.option("--dp-shard", type=POSITIVE_INT, default=None,
                     help="HSDP: shard weights and states over this many data-parallel ranks, replicate over the "
                          "rest (torchtitan's data_parallel_shard_degree)."),
        click.option("--ep-overlap/--no-ep-overlap", default=False, show_default=True,
                     help="Hide expert all-to-alls under another micro-batch's compute (1F1B A2A overlap; "
                          "with --schedule zb-v, DualPipeV's paired chunks hide them all)."),
        click.option("--network", default=None,
                     help="The fabric between nodes: a cluster preset (dgx-h100-superpod, dgx-a100-superpod, "
                          "jean-zay-a100, juwels-booster, gb200-nvl72, gcp-a3-high), NIC rate x NICs per node and "
                          "topology (400G-x8-rail, 100G-x4-fat-tree-2to1), or nic=,nics=,topology=,oversub=,leaf=,"
                          "latency-us=,gpus-per-node= (default: the --gpu preset's own build)."),
        click.option("--ep-dispatcher", type=Choice(list(EP_DISPATCHERS)), default="alltoall", show_default=True,
                     help="MoE token dispatch: alltoall (NCCL), allgather (all tokens gathered to the expert group, "
                          "outputs reduce-scattered) or deepep (one copy per node, NVLink forwarding)."),
        click.option("--moe-imbalance", type=Number(maximum=64, minimum=1), default=1.0, show_default=True,
                     help="Tokens on the busiest EP rank over the mean (1 = balanced routing)."),
        click.option("--mtp-layers", type=Count(whole=True, maximum=64), default=None,
                     help="Multi-token-prediction layers on the last stage (DeepSeek-V3: 1)."),
        click.option("--attention-kernel", type=Choice(list(ATTENTION_KERNELS)), default="auto", show_default=True,
                     help="Attention kernel timed: auto (today's cuDNN on Hopper/Blackwell, FlashAttention-2 on "
                          "Ampere); cudnn-2024: the FlashAttention-3 paper's cuDNN curve."),
        click.option("--fp8-attention", is_flag=True, help="Run the attention core in FP8 (TE fp8_dpa; FP8/FP4 "
                                                           "recipes)."),
        click.option("--recompute-layers", type=POSITIVE_INT, default=None,
                     help="With --recompute full: how many layers of each pipeline stage recompute (default all)."),
        click.option("--recompute-modules", default=None,
                     help="With --recompute selective: a comma list of " + ", ".join(RECOMPUTE_MODULES) + "."),
    ])


def serving_options(func: F) -> F:
    return apply(func, [
        click.option("--weight-dtype", type=DType(STORAGE_DTYPES), default=None,
                     help="Default: as the checkpoint ships them (its quantization_config: mxfp4, fp8 with scales, "
                          "AWQ, GPTQ, bitsandbytes, ...). Given: bf16, fp16, fp8, int8, int4 (group 128), mxfp4, nvfp4 "
                          "or fp32 for every block matmul, overriding the checkpoint."),
        click.option("--kv-dtype", type=DType(STORAGE_DTYPES), default=None,
                     help="KV cache dtype (default: the activation dtype, bf16 or fp16)."),
        click.option("--compute-dtype", type=DType(), default=None,
                     help="Which peak to use (default: fp8 for fp8 weights where the device has it, else bf16)."),
        click.option("--n-gpus", type=DEGREE, default=1, show_default=True,
                     help="GPUs serving one replica, tensor parallel (the total for that replica)."),
    ])


def vllm_options(func: F) -> F:
    """`serve`: vLLM's own settings, spelled as vLLM spells them, and the targets of the inverse question."""
    return apply(func, [
        click.option("--max-model-len", type=LENGTH, default=None,
                     help="Tokens per request the KV cache must hold (default: the model's max_position_embeddings; "
                          "--engine trtllm: the workload's longest request, as trtllm-bench builds its engine)."),
        click.option("--gpu-memory-utilization", type=MFU, default=None,
                     help="Share of each GPU's CUDA-visible memory vLLM may use (default: the version's, 0.92 from "
                          "v0.21, 0.9 before)."),
        click.option("--block-size", type=POSITIVE_INT, default=None,
                     help="Tokens per paged-KV block (default: the attention backend's: 16; MLA 64 on Hopper, 128 "
                          "on Blackwell)."),
        pp_option,
        click.option("--dp", type=DEGREE, default=1, show_default=True,
                     help="Data-parallel replicas (vLLM --data-parallel-size)."),
        click.option("--enable-expert-parallel", "expert_parallel", is_flag=True,
                     help="MoE: routed experts split whole over tp x dp GPUs instead of tensor parallel."),
        click.option("--max-num-batched-tokens", type=POSITIVE_INT, default=None,
                     help="Tokens per scheduler step, the profiling run's (default: vLLM's for this GPU)."),
        click.option("--max-num-seqs", type=POSITIVE_INT, default=None,
                     help="Sequences per step, the dummy sampler's rows (default: vLLM's for this GPU)."),
        click.option("--vllm-version", "version", type=NAME, default=None,
                     help="Whose memory accounting: a release (e.g. 0.11.0; one before 0.6.4 is answered as 0.6.4) or "
                          "v0 for the V0 engine (default: the current release, 0.29)."),
        click.option("--enforce-eager", is_flag=True,
                     help="vLLM --enforce-eager: no CUDA graphs are captured, so none is charged (from v0.21)."),
        click.option("--language-model-only", is_flag=True,
                     help="vLLM --language-model-only: a multimodal checkpoint's vision tower is neither loaded nor "
                          "profiled."),
        click.option("--concurrency", type=POSITIVE_INT, default=None,
                     help="Concurrent max-length requests to serve: answers the fewest GPUs and the layout."),
        click.option("--max-ttft", "ttft", type=Number(maximum=1e6), default=None,
                     help="With --concurrency: seconds to the first token of a max-length prompt, at most; with "
                          "--input-len and traffic: the mean TTFT of the workload, at most."),
        click.option("--min-tokens-per-second", "tokens_per_second", type=QUANTITY, default=None,
                     help="With --concurrency: generated tokens per second of all sequences, at least."),
    ])


def report_serving_options(func: F) -> F:
    """The workload `report --serve` sizes a deployment for (serve's workload mode, report defaults stated)."""
    return apply(func, [
        click.option("--plan-layout", type=Choice(["best", "given"]), default="best", show_default=True,
                     help="best: plan each model on the layout `llmcalc layout` recommends for these GPUs and this "
                          "batch; given: on --tp, --zero and --micro-batch as given (dp = n-gpus / tp)."),
        click.option("--input-len", type=LENGTH, default=1024, show_default=True,
                     help="With --serve: prompt tokens per request."),
        click.option("--output-len", type=LENGTH, default=256, show_default=True,
                     help="With --serve: generated tokens per request."),
        click.option("--max-concurrency", type=CountList(MAX_BATCH), default="64", show_default=True,
                     help="With --serve: clients in a closed loop (a comma list, 1,8,64, also draws the "
                          "throughput-latency curve; the deployment is sized for the largest)."),
        click.option("--max-ttft", "ttft", type=Number(minimum=1e-6, maximum=1e6), default=2.0, show_default=True,
                     help="With --serve: mean seconds to the first token, at most."),
        click.option("--max-tpot", "tpot", type=Number(minimum=1e-6, maximum=1e3), default=0.05, show_default=True,
                     help="With --serve: mean seconds per output token, at most."),
    ])


def workload_options(func: F) -> F:
    """`serve`'s workload mode, spelled as `vllm bench serve` spells it."""
    return apply(func, [
        click.option("--input-len", type=LENGTH, default=None,
                     help="Prompt tokens per request: with --output-len, predicts throughput, TTFT, TPOT and "
                          "latency for this workload (`vllm bench serve --random-input-len`)."),
        click.option("--output-len", type=LENGTH, default=None, help="Generated tokens per request."),
        click.option("--max-concurrency", type=CountList(MAX_BATCH), default=None,
                     help="Clients in a closed loop (one count, or a comma list for the throughput-latency curve: "
                          "1,8,64,256). Default: offline, every request at once."),
        click.option("--request-rate", type=Number(minimum=1e-6, maximum=1e6), default=None,
                     help="Requests per second, Poisson arrivals (vllm bench serve's); with or without "
                          "--max-concurrency. Default: all at once."),
        click.option("--num-prompts", type=POSITIVE_INT, default=1000, show_default=True,
                     help="Requests in the benchmark run (vllm bench serve's default)."),
        click.option("--dataset", type=Choice(["random", "sharegpt"]), default="random", show_default=True,
                     help="Request lengths as vllm bench serve's --dataset-name draws them: random (--input-len and "
                          "--output-len each, or within --random-range-ratio of them) or sharegpt (varied, "
                          "--input-len and --output-len their means, within vLLM's ShareGPT filter)."),
        click.option("--random-range-ratio", type=Number(maximum=0.999, zero=True), default=0.0,
                     help="--dataset random: each length uniform in [L(1-r), L(1+r)] (vllm bench's). Default: 0."),
        click.option("--max-tpot", "tpot", type=Number(minimum=1e-6, maximum=1e3), default=None,
                     help="With --input-len and --request-rate or --max-concurrency: seconds per output token (mean "
                          "TPOT) at most; with --max-ttft (mean TTFT, seconds), answers the fewest GPUs and layout."),
        click.option("--engine", type=Choice(["vllm", "sglang", "trtllm"]), default="vllm", show_default=True,
                     help="Serving engine whose scheduler, memory, kernels and step are modelled "
                          "(llmcalc/analytic/engines.py)."),
        click.option("--engine-version", type=NAME, default=None,
                     help="The engine's release (vLLM: the same as --vllm-version; TensorRT-LLM and SGLang: any "
                          "release, e.g. 0.12.0 or 1.0.0, its defaults and backend by release, analytic/"
                          "engine_versions.py; default: TensorRT-LLM 1.3.0rc20 and SGLang 0.5.14, the releases their "
                          "kernel tables were measured in)."),
        click.option("--num-scheduler-steps", type=POSITIVE_INT, default=1, show_default=True,
                     help="vLLM V0's multi-step scheduling (0.6-0.10, --vllm-version v0 or 0.6.x): the scheduler "
                          "runs once per N decode steps, arrivals wait for the pass."),
    ])


def scenario_options(func: F) -> F:
    """The training run and per-GPU set-up that compare and report assume."""
    return apply(func, [
        seq_len_option,
        click.option("--tokens", type=TOKENS, default="2T", show_default=True, help=TOKENS_HELP),
        gpu_option(default="h100-sxm"),
        n_gpus_option(default=256),
        click.option("--mfu", type=MFU, default=0.4, show_default=True,
                     help="Model FLOPs utilization assumed (0.4 or 40%)."),
        price_option,
        scenario_goodput_option,
        recipe_option,
        peak_dtype_option,
        layout_options,
        recompute_option(),
        causal_option,
    ])


# --- option presence (click's context) ---------------------------------------------------------------------


def given(ctx: click.Context, *names: str) -> list[str]:
    """The options among `names` (parameter names) that the user typed, as their flags. A name the command has no
    parameter of is a mistake in the command (it would never be found given): a TypeError, which tests meet."""
    unknown = set(names) - {param.name for param in ctx.command.params}
    if unknown:
        raise TypeError(f"{ctx.command.name} has no parameter {', '.join(sorted(unknown))} (its parameter names, not "
                        f"its flags)")
    flags = []
    for param in ctx.command.params:
        if param.name in names and ctx.get_parameter_source(param.name) in (ParameterSource.COMMANDLINE,
                                                                            ParameterSource.ENVIRONMENT):
            flags.append(param.opts[0])
    return flags


def given_names(ctx: click.Context, *names: str) -> list[str]:
    """The parameters among `names` that the user typed, by parameter name (``given`` gives their flags)."""
    given(ctx, *names)  # an unknown name is the command's mistake: a TypeError
    return [name for name in names if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                                                         ParameterSource.ENVIRONMENT)]


def typed(ctx: click.Context, values: dict[str, Any]) -> dict[str, Any]:
    """Of `values` (parameter name -> value), those the user typed; the defaults of the others are the core's."""
    sources = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return {name: value for name, value in values.items() if ctx.get_parameter_source(name) in sources}


def refuse_unused(ctx: click.Context, names: tuple[str, ...], reason: str) -> None:
    """One line when options that would be ignored were given: '--steps, --compile: <reason>'."""
    flags = given(ctx, *names)
    if flags:
        raise click.UsageError(f"{', '.join(flags)} {'is' if len(flags) == 1 else 'are'} not used {reason}; "
                               f"leave {'it' if len(flags) == 1 else 'them'} out")


def recipe_of(ctx: click.Context, recipe: str, dtype: str | None, gpu: str | None) -> tuple[str, list[str]]:
    """--recipe as typed, else the one --dtype names (analytic.precision.recipe_for_dtype: fp8 is Transformer
    Engine's default FP8 recipe on `gpu`), and the line that says which; neither typed: --recipe's default."""
    if dtype is None or given(ctx, "recipe"):
        return recipe, []
    from ..analytic.precision import recipe_for_dtype

    chosen, note = recipe_for_dtype(dtype, gpu)
    return chosen, [] if note is None else [note]
