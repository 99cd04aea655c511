"""A tiny randomly initialised Llama with SmolLM2's tokenizer, for fast tests and UI development.

Its output is gibberish, but it exercises every code path (GQA, tied embeddings, RoPE) in milliseconds.
"""

from __future__ import annotations

import torch

from .embedded import converted_default
from .loaded import TINY_MODEL, LoadedModel


def build_tiny_model(seed: int = 0, num_layers: int = 2) -> LoadedModel:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(converted_default())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        attn_implementation="sdpa",
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=tokenizer, name=TINY_MODEL)
