"""A random 3-layer Llama with the byte tokenizer, shared by the extraction and SFT tests."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from experiments.models import byte_tokenizer


@pytest.fixture(scope="module")
def lm_tok():
    torch.manual_seed(0)
    tok = byte_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(cfg).eval(), tok
