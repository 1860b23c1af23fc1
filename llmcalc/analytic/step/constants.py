"""The step model's named constants: the one fitted to whole steps (KERNEL_EFFICIENCY) and the measured ones."""

from __future__ import annotations

# The one constant fitted to whole training steps: the share of the isolated-kernel rates (MAMF, the attention
# tables, streaming HBM) that kernels keep inside a real training step (clocks under sustained power load,
# launch gaps, synchronisation). Fitted once, globally, to the validation set of benchmarks/bench_steptime.py
# (least squares in log space over all rows); the benchmark reports its leave-one-source-out errors.
KERNEL_EFFICIENCY = 0.73
# Load imbalance of routed experts under dropless routing with an auxiliary balance loss: tokens on the most
# loaded EP rank / the mean. 1.0 = forced balance (Megatron-Core's --moe-router-force-load-balancing, what MoE
# benchmarks run); published runs with real routing pass their own (--moe-imbalance).


MOE_IMBALANCE = 1.0
# SMs the expert-parallel communication kernels hold while they overlap compute: "only 20 SMs are sufficient to
# fully utilize the bandwidths of IB and NVLink" (DeepSeek-V3 report, arXiv 2412.19437 sec. 3.2.2).


EP_OVERLAP_SMS = 20
# TransformerEngine's comm+GEMM overlap (userbuffers, Megatron-LM --tp-comm-overlap), its default configuration
# (transformer_engine/pytorch/module/base.py initialize_ub, get_default_config; Megatron-LM passes no ub_cfgs unless
# --tp-comm-overlap-cfg names a file): the row-parallel forward GEMMs (proj_fprop, fc2_fprop) run "pipeline", split
# in num_splits = 4 along the tokens with each chunk's reduce-scatter under the next chunk's GEMM; the column-parallel
# input- and weight-gradient GEMMs (qkv/fc1 dgrad, wgrad) run "bulk", beside an all-gather or reduce-scatter that
# runs whole; both hold num_sm = 16 SMs for the communication kernel with set_sm_margin, so the GEMM beside it runs
# on the others; the column-parallel forward and row-parallel input-gradient GEMMs (qkv/fc1 fprop, proj/fc2 dgrad)
# run "ring_exchange", split in tp chunks, each chunk moved to the next rank by the copy engines (use_ce, num_sm 1,
# no SM margin) under the GEMM of the one before.


TP_OVERLAP_SMS = 16
TP_OVERLAP_SPLITS = 4
# The compute streams TE's overlaps launch their split GEMMs on, round robin (NVTE_COMM_OVERLAP_MAX_STREAMS,
# transformer_engine/common/include/transformer_engine/comm_gemm_overlap.h): up to this many chunks run at once.
TP_OVERLAP_STREAMS = 3
# The share of the expert all-to-alls that 1F1B A2A overlap (Megatron-Core --overlap-moe-expert-parallel-comm)
# hides behind the other micro-batch's compute: calibrated once on the one published pair that isolates it,
# Megatron-MoE-ModelZoo's Qwen3-235B on 256 H100 with EP 32 across nodes, 19.7 s per step without and 17.6 s with
# it (the same layout; bench_steptime.fit_ep_overlap). The rest stays exposed: the dispatch -> experts -> combine
# chain of one micro-batch can hide only behind the parts of the other's layer that are independent of it.


EP_OVERLAP_SHARE = 0.4
# The share DualPipe hides: its V-shaped form (DualPipeV, deepseek-ai/DualPipe README: DualPipe "cut in half", the
# first and last chunks on one rank, as --schedule zb-v places them) runs a forward chunk and a backward chunk of two
# micro-batches as one overlapped pair, attention, dispatch, MLP and combine interleaved with SMs split between
# them, which "ensures that both all-to-all and PP communication can be fully hidden during execution" (DeepSeek-V3
# report, arXiv 2412.19437 sec. 3.2.1). A published statement, not a fit: all of it, up to the paired compute.


DUALPIPE_EP_OVERLAP_SHARE = 1.0
# Megatron's distributed-optimizer bucket: max(40 M, 1 M x dp) parameters (megatron/core/distributed/
# distributed_data_parallel_config.py bucket_size default); the last bucket's reduction cannot overlap.


DP_BUCKET_PARAMS = 40e6


MUON_NS_STEPS = 5  # Newton-Schulz iterations per step (Jordan et al. 2024, Moonlight arXiv 2502.16982)
# Projections that read the same input run as one GEMM with their output columns concatenated, as Megatron-Core
# builds them: linear_qkv (q, k, v) and linear_fc1 (gate and up).
