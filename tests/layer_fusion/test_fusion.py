"""DepthFusion, ExtraLayers and FusionModel against the papers' equations and against independent computations:
scalar mix at λ=0 is the mean, Concat is one Linear over the concatenation, DWAtt is eqs. 3-11 recomputed by hand,
every mode is position-wise, the cached-states path is the token path, and a pre-LN decoder's blocks are normed as
the truncated model would norm them."""
import functools
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from experiments.config import ModelConfig, load_group
from experiments.models import SequenceHead, TokenHead, load_encoder
from layer_fusion.fusion import MODES, DepthFusion, ExtraLayers, final_norm_of, prenorm
from layer_fusion.model import FusionModel, stack_blocks

L, D = 4, 32


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def z(*lead):
    return torch.randn(*lead, L, D)


def randomized(module: nn.Module) -> nn.Module:
    """Every parameter drawn at random: LayerNorms at their identity init would hide a missing or misplaced norm."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module


@functools.cache
def backbone(name):
    """The tiny random backbone (built once per name: tests read it, never change it)."""
    _, model = load_encoder(load_group("model", name, ModelConfig, "test"))
    return model.eval()


def batch(vocab=200, B=3, T=7):
    ids = torch.randint(5, vocab, (B, T))
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 4:] = 0  # right padding, two lengths
    mask[2, 2:] = 0
    return ids, mask


# ---- static modes ------------------------------------------------------------------------------------------------
def test_scalar_mix_at_zero_is_the_mean_and_a_large_last_lambda_is_last():
    x = z(2, 5)
    mix = DepthFusion("scalar_mix", L, D)
    assert torch.allclose(mix(x), DepthFusion("mean", L, D)(x), atol=1e-6)
    with torch.no_grad():
        mix.lam[-1] = 50.0
    assert torch.allclose(mix(x), DepthFusion("last", L, D)(x), atol=1e-6)
    assert torch.allclose(mix.layer_weights(), F.one_hot(torch.tensor(L - 1), L).float(), atol=1e-6)


def test_concat_is_one_linear_over_the_concatenated_blocks():
    fusion = DepthFusion("concat", L, D)
    c = fusion.concat
    linear = nn.Linear(L * D, D)
    with torch.no_grad():
        linear.weight.copy_(torch.cat(list(c.weight), dim=1))  # W = [W_1 .. W_L]: (d, L·d)
        linear.bias.copy_(c.bias.sum(0))  # b = Σ b_n
    x = z(2, 5)
    assert torch.allclose(fusion(x), linear(x.flatten(-2)), atol=1e-5)
    assert sum(p.numel() for p in fusion.parameters()) == L * (D * D + D)


# ---- DWAtt -------------------------------------------------------------------------------------------------------
def bottleneck_by_hand(f, x):
    h = F.gelu(x @ f.up.weight.T + f.up.bias)
    h = F.layer_norm(h, h.shape[-1:], f.norm.weight, f.norm.bias, f.norm.eps)
    return h @ f.down.weight.T + f.down.bias


def attend_by_hand(m, x, scale=1.0):
    """DWAtt eqs. 4-8 from the module's tensors: (weights, Attend)."""
    z_last = x[..., -1, :]
    q = 1 + F.elu(z_last + bottleneck_by_hand(m.query, z_last))  # eq. 5
    K = m.k_pos @ m.key.weight.T + m.key.bias  # eq. 10: (L, d)
    a = torch.softmax(q @ K.T * scale, -1)  # eq. 7
    v = torch.stack([F.layer_norm(bottleneck_by_hand(f, x[..., n, :]), (D,), ln.weight, ln.bias, ln.eps)
                     for n, (f, ln) in enumerate(zip(m.values, m.value_norms))], -2)  # eq. 4
    return a, (a.unsqueeze(-2) @ v).squeeze(-2)  # eq. 8


@pytest.mark.parametrize("scale", [False, True])
def test_dwatt_is_the_papers_equations(scale):
    fusion = randomized(DepthFusion("dwatt", L, D, scale=scale))
    x = z(2, 5)
    a, attend = attend_by_hand(fusion.dwatt, x, 1 / math.sqrt(D) if scale else 1.0)
    w = fusion.layer_weights(x)
    assert torch.allclose(w, a, atol=1e-6)
    assert (w > 0).all() and torch.allclose(w.sum(-1), torch.ones(2, 5), atol=1e-6)
    assert torch.allclose(fusion(x) - x[..., -1, :], attend, atol=1e-5)  # eq. 9: h = z_L + Attend


def test_dwatt_scores_are_unscaled_unless_asked():
    plain = randomized(DepthFusion("dwatt", L, D))
    scaled = DepthFusion("dwatt", L, D, scale=True)
    scaled.load_state_dict(plain.state_dict())
    x = z(3)
    a, _ = attend_by_hand(plain.dwatt, x, 1.0)
    b, _ = attend_by_hand(plain.dwatt, x, 1 / math.sqrt(D))
    assert torch.allclose(plain.layer_weights(x), a, atol=1e-6)
    assert torch.allclose(scaled.layer_weights(x), b, atol=1e-6)
    assert not torch.allclose(a, b, atol=1e-3)  # the scale is visible


def test_dwatt_static_keys_are_a_saved_buffer_without_gradient():
    fusion = DepthFusion("dwatt", L, D)
    m = fusion.dwatt
    assert "dwatt.k_pos" in fusion.state_dict() and "dwatt.k_pos" not in dict(fusion.named_parameters())
    assert m.k_pos.shape == (L, 24) and (m.k_pos >= 0).all() and (m.k_pos < 1).all()  # U(0,1), d_pos = 24
    fusion(z(2, 3)).sum().backward()
    assert m.k_pos.grad is None and not m.k_pos.requires_grad and m.key.weight.grad is not None
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(DWAttKeys(g1), DWAttKeys(g2))  # drawn from the given generator: reproducible per trial


def DWAttKeys(gen):
    return DepthFusion("dwatt", L, D, generator=gen).dwatt.k_pos


# ---- position-wise -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_fusing_a_subset_of_positions_equals_fusing_all_then_selecting(mode):
    fusion = randomized(DepthFusion(mode, L, D)) if mode != "last" else DepthFusion(mode, L, D)
    x = z(3, 6)
    keep = torch.tensor([0, 2, 5])
    assert torch.allclose(fusion(x)[:, keep], fusion(x[:, keep]), atol=1e-6)
    assert torch.allclose(fusion(x)[1, 4], fusion(x[1, 4]), atol=1e-6)  # one position, no leading axes


# ---- FusionModel: token path == cached-states path ---------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_bert_token_head_reads_the_same_from_ids_and_from_states(mode):
    bb = backbone("tiny-bert")
    model = FusionModel(randomized(DepthFusion(mode, L, D)), TokenHead(D, 5), bb).eval()
    ids, mask = batch()
    with torch.no_grad():
        from_ids = model(mask, input_ids=ids).logits
        hs = bb(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        fe = FusionModel(model.fusion, model.head).eval()  # no backbone: the activation-store path
        from_states = fe(mask, states=torch.stack(hs[1:], -2)).logits
    assert torch.allclose(from_ids, from_states, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["as_is", "norm_each", "norm_pooled"])
def test_llama_sequence_head_reads_the_same_from_ids_states_and_pooled_states(mode, how):
    bb = backbone("tiny-llama")
    norm = final_norm_of(bb)
    head = SequenceHead(D, 3, "last")
    model = FusionModel(randomized(DepthFusion(mode, L, D)), head, bb, final_norm=norm, prenorm_handling=how).eval()
    ids, mask = batch()
    with torch.no_grad():
        from_ids = model(mask, input_ids=ids).logits
        states = torch.stack(bb(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[1:], -2)
        fe = FusionModel(model.fusion, head, final_norm=norm, prenorm_handling=how).eval()
        from_states = fe(mask, states=states).logits
        # the P-32 feature-extraction path: one state per example (the last real token), a head that reads it
        last = states[torch.arange(3), mask.sum(1) - 1].unsqueeze(1)
        pooled_head = SequenceHead(D, 3, "cls")
        pooled_head.load_state_dict(head.state_dict())
        pooled = FusionModel(model.fusion, pooled_head, final_norm=norm, prenorm_handling=how).eval()
        from_pooled = pooled(torch.ones(3, 1, dtype=torch.long), states=last).logits
    assert torch.allclose(from_ids, from_states, atol=1e-5)
    assert torch.allclose(from_ids, from_pooled, atol=1e-5)


# ---- pre-LN decoders ---------------------------------------------------------------------------------------------
def test_hf_last_hidden_state_of_a_pre_ln_decoder_is_the_final_norm_of_the_raw_last_block():
    bb = backbone("tiny-llama")
    norm = final_norm_of(bb)
    assert norm is bb.norm and final_norm_of(backbone("tiny-bert")) is None  # post-LN encoders: nothing to apply
    seen = []
    handle = norm.register_forward_hook(lambda mod, args, out: seen.append(args[0]))
    ids, mask = batch()
    with torch.no_grad():
        hs = bb(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    handle.remove()
    (raw,) = seen
    assert len(hs) == L + 1
    assert torch.allclose(hs[-1], norm(raw), atol=1e-5) and not torch.allclose(hs[-1], raw, atol=1e-3)
    assert not torch.allclose(hs[-2], norm(hs[-2]), atol=1e-3)  # blocks 1..L-1 are raw residual states


def test_norm_each_norms_every_block_but_the_last():
    norm = randomized(nn.LayerNorm(D))
    x = z(2, 3)
    out = prenorm(x, norm, "norm_each")
    assert torch.equal(out[..., -1, :], x[..., -1, :])
    assert torch.allclose(out[..., :-1, :], norm(x[..., :-1, :]), atol=1e-6)
    assert torch.equal(prenorm(x, norm, "as_is"), x) and torch.equal(prenorm(x, norm, "norm_pooled"), x)
    assert torch.equal(prenorm(x, None, "norm_each"), x)  # an encoder: nothing to apply


@pytest.mark.parametrize("n", [1, 2, 3])
def test_truncating_a_pre_ln_decoder_equals_the_model_built_with_n_blocks(n):
    full = backbone("tiny-llama")
    norm = final_norm_of(full)
    short_cfg = type(full.config).from_dict({**full.config.to_dict(), "num_hidden_layers": n})
    short = type(full)(short_cfg).eval()
    missing, unexpected = short.load_state_dict(full.state_dict(), strict=False)
    assert not missing and all(k.startswith("layers.") for k in unexpected)  # the same first n blocks
    ids, mask = batch()
    with torch.no_grad():
        hs_full = full(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        hs_short = short(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        blocks = stack_blocks(hs_full, n, norm)
        assert torch.allclose(blocks[..., -1, :], hs_short[-1], atol=1e-5)  # block n gets the final norm
        assert torch.allclose(blocks, torch.stack(hs_short[1:], -2), atol=1e-5)
        head = SequenceHead(D, 3, "last")
        truncated = FusionModel(DepthFusion("last", n, D), head, full, final_norm=norm).eval()
        rebuilt = FusionModel(DepthFusion("last", n, D), head, short, final_norm=final_norm_of(short)).eval()
        assert torch.allclose(truncated(mask, input_ids=ids).logits, rebuilt(mask, input_ids=ids).logits, atol=1e-5)


# ---- Base+n ------------------------------------------------------------------------------------------------------
def test_extra_layers_ignore_padding_and_match_a_backbone_block_in_size():
    bb = backbone("tiny-bert")
    extra = ExtraLayers(bb, 2).eval()
    h = torch.randn(2, 6, D)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    noisy = h.clone()
    noisy[0, 4:] = 100 * torch.randn(2, D)  # what sits at padded positions must not reach real ones
    with torch.no_grad():
        a, b = extra(h, mask), extra(noisy, mask)
    assert torch.allclose(a[0, :4], b[0, :4], atol=1e-5) and torch.allclose(a[1], b[1], atol=1e-6)
    assert not torch.allclose(a[0, :4], extra(h, torch.ones_like(mask))[0, :4], atol=1e-4)  # the mask is used
    one = sum(p.numel() for p in ExtraLayers(bb, 1).parameters())
    assert one == sum(p.numel() for p in bb.encoder.layer[0].parameters())
    assert type(extra.layers[0]) is type(bb.encoder.layer[0])


# ---- errors ------------------------------------------------------------------------------------------------------
def test_an_unknown_mode_names_the_value():
    with pytest.raises(ValueError, match="'lstm'.*last, mean, scalar_mix, concat, dwatt"):
        DepthFusion("lstm", L, D)


@pytest.mark.parametrize("shape", [(2, L + 1, D), (2, L, D + 1)])
def test_a_wrong_block_shape_names_the_shape(shape):
    with pytest.raises(ValueError, match=re.escape(f"expects (..., {L}, {D}) block outputs, got {shape}")):
        DepthFusion("mean", L, D)(torch.zeros(*shape))


def test_extra_layers_on_a_decoder_name_it():
    with pytest.raises(ValueError, match="LlamaModel has no encoder.layer"):
        ExtraLayers(backbone("tiny-llama"), 1)


def test_scalar_mix_keeps_a_small_lambda_deviation_under_bf16():
    """softmax(λ) near 1/L cast to bf16 moves in steps of ~0.4% (1/8 -> 0.125 exactly, its neighbours 0.124 and
    0.126): a λ that has moved 0.1% from uniform must still change the mix of bf16 block outputs, as in fp32."""
    blocks = torch.randn(4, 16, 8, 64).to(torch.bfloat16)
    fusion = DepthFusion("scalar_mix", 8, 64)
    uniform = fusion(blocks)
    with torch.no_grad():
        fusion.lam[0] = 1e-3  # block 1's weight 0.125 -> 0.125109: 0.1% off uniform
    moved = fusion(blocks)
    assert moved.dtype == torch.bfloat16
    assert not torch.equal(moved, uniform), "the 0.1% move of λ was rounded away"
    exact = (fusion.lam.detach().softmax(0)[:, None] * blocks.float()).sum(-2)
    assert ((moved.float() - uniform.float()) * (exact - uniform.float()) >= 0).all()  # moved the fp32 way, or not
    torch.testing.assert_close(moved.float(), exact, atol=0, rtol=2 ** -8)  # only the output's own bf16 rounding
