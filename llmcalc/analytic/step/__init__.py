"""Step time and MFU predicted from the parallel layout: TP x CP x PP x DP (x EP), per GPU.

The model, one micro-batch on one pipeline stage at a time, then the pipeline, then the step. Each term is a
mechanism with a published measurement of it (llmcalc.analytic.kernels for the kernels, comm for the
collectives); one constant is fitted to whole training steps, KERNEL_EFFICIENCY. Every prediction lists what
it assumed (``StepPrediction.assumptions``, JSON ``assumptions``).

1. Compute, per layer, from the flops module's per-layer ops (``flops.layer_ops``: a new layer kind arrives with
   its FLOPs) split over tp and cp:
   - projections as GEMMs on the smooth roofline at the recipe's GEMM rate (``kernels.gemm_seconds``; bf16, FP8,
     MXFP8, NVFP4), fused as Megatron-Core builds them (QKV, gate+up); forward, then the backward's input- and
     weight-gradient GEMMs with their own shapes; MoE experts as one grouped GEMM of the rows each local expert
     receives (times MoE_IMBALANCE on the slowest rank);
   - FP8/FP4 recipes quantize each GEMM input (activations forward, output gradients backward) in
     memory-bound passes (``kernels.QUANT_BYTES``) and their weights once per step;
   - the attention core at the kernel's measured rate for its head dim, length and mask, on the pairs it
     computes (causal for a decoder whatever ``causal`` counts, the window of sliding layers, the chunks of
     chunked attention), BF16 under FP8 recipes unless ``fp8_attention``; eager attention (materialised S²,
     Megatron-LM before FlashAttention) as batched GEMMs and softmax passes (``eager_attention_seconds``);
   - state-space scans (Mamba-2 SSD, Gated DeltaNet) in their chunked tensor-core form, conv1d and
     elementwise work (norms, rotary, activation, residual adds, MoE permute/unpermute) as bytes at the HBM
     bandwidth, fused as Transformer Engine / torch.compile run them (``fused_elementwise``; eager PyTorch
     makes twice the passes);
   - recomputation re-runs what it recomputes: full (all layers, or the first ``recompute_layers`` of each stage
     chunk, Megatron's block method), selective (the attention core), or a list of modules
     (``RECOMPUTE_MODULES``: core_attn, layernorm, mla_up_proj, moe_act, mlp, moe, shared_experts).
2. Communication (llmcalc.analytic.comm), ranks placed by the framework's order (``order``, default
   Megatron-Core's "tp-cp-ep-dp-pp"; "tp-cp-ep-pp-dp" is Llama 3's [TP, CP, PP, DP]); the routed experts' mesh
   [etp, ep, expert dp] folds over the tp x cp x dp ranks (Megatron-Core's MoE parallel folding):
   - TP all-gather / reduce-scatter (or all-reduce) around each sub-block: exposed; with ``tp_overlap`` beside
     their GEMMs split in chunks as TransformerEngine's userbuffers run them, at the cost of the SMs its kernels
     hold, the split shapes and the last chunk's reduce-scatter (collectives.tp_overlap_forward / _backward);
   - CP: p2p ring chunk by chunk (each step's K/V transfer under the previous step's attention block, load-
     balanced chunks: ``cp_comm="p2p"``, Megatron's default), all-gather of K/V before the kernel (Llama 3:
     exposed), or all-to-all of Q, K, V and O over heads (Ulysses; exposed);
   - EP dispatch / combine all-to-alls: exposed, or with ``ep_overlap`` under the other micro-batch's compute
     (Megatron's 1F1B A2A overlap, DualPipe) at the cost of the SMs the communication kernels hold;
   - PP sends delay the dependent action on the next rank (pipeline.py);
   - DP (over dp x cp ranks: CP ranks hold the same weights): gradient reduce-scatter under the last
     micro-batch's backward and weight all-gather under the first forward (Megatron's overlapped distributed
     optimizer; the last bucket exposed); ZeRO-3 per layer and micro-batch, each layer's transfer under the
     previous layer's compute (FSDP prefetch).
3. Pipeline: llmcalc.analytic.pipeline (closed form where the schedule's timeline is exact, else simulated);
   layers split over pp·vpp stages as evenly as possible, any shortfall from the first and last stages (which
   also hold the embedding and the LM head, and the MTP layers), as Llama 3 did.
4. Optimizer step: memory-bound AdamW (or Muon, whose Newton-Schulz iterations are GEMMs) over this GPU's
   shard, and the FP8/FP4 recipes' weight casts.

Step time = pipeline makespan + exposed DP + optimizer. MFU = model FLOPs / (step x GPUs x peak) (PaLM App. B);
HFU counts recomputation. ``causal`` changes only how FLOPs are counted, never the time.

The package, one concept per module (imports flow down this list, never back):
- ``constants``: the named constants (KERNEL_EFFICIENCY, the only one fitted to whole steps; MOE_IMBALANCE, ...);
- ``cache``: the memo tables of one call (``Tables``, ``per_call``: a prediction's or a search's, dropped after it);
- ``layout``: ``Layout`` and its rank order's strides, ``make_layout`` and every check of a setting, the layouts a
  search tries, ``stage_split``;
- ``context``: ``StepContext``, one prediction's fixed inputs (``StepInputs``) and the GEMM / HBM-stream times they
  imply;
  ``StageTimes``; the layout's layer fields every layer key holds (``LayerLayout``, ``ExpertLayout``);
- ``attention``, ``collectives``, ``moe``: the attention core (and scans, the indexer), the collectives of a layer
  and where their groups sit (TP, CP, EP, PP sends), one MoE block;
- ``layer``: one layer's cost composed of those terms; the embedding, LM head and MTP modules;
- ``stages``: which layers each pipeline stage holds and what it costs;
- ``dp``: data parallelism and the optimizer step;
- ``prediction``: ``predict`` and ``StepPrediction``, composing the stages, the pipeline, DP and the optimizer;
- ``train``: ``train --global-batch``'s entry (``train_steptime``, ``global_batch_sequences``);
- ``bounds``, ``search``: the layout search's floors and the search itself (``search_layouts``, ``rank_layouts``,
  ``LayoutSearch``); its memory check asks memory.training_memory (``layout.layout_memory``, one model).
"""
