"""The one decoder definition (Llama-style, optionally MoE) that training, serving and the tests'
full-sequence reference all run: `decoder.Transformer` built from a `ModelSpec`.

- layers.py: RMSNorm, rotate-half RoPE, dense feed-forward;
- moe.py: top-k routed experts with the training knobs (bias, capacity, dispatcher, load);
- attention.py: causal GQA attention over a whole sequence, a context-parallel ring, or a paged KV cache;
- paged_attention.py: the paged KV-cache attention path (vLLM's PagedAttention layout);
- decoder.py: blocks, the model, `build_model`, `reference_logits`.
"""
