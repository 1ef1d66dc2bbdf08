"""eat/flops.py: the analytic FLOP count against a count done by hand for a tiny encoder."""
import pytest

from eat.flops import Layer, encoder_flops, keys_per_query, layer_macs, normalised


def test_keys_per_query_dense_window_and_short_inputs():
    assert keys_per_query(100, None) == 100
    assert keys_per_query(100, 16) == 34  # 33 window keys (self included) + the global [CLS]
    assert keys_per_query(20, 16) == 20  # a short input: the window already holds every token


def test_a_tiny_encoder_by_hand():
    d, d_ff, w = 4, 8, 1
    # layer 1: every example, 6 tokens, k = min(6, 2w + 2) = 4
    #   projections 4·6·16 = 384, attention 2·6·4·4 = 192, FFN 2·6·4·8 = 384 -> 960 multiply-adds
    # layer 2: half the examples (the rest exited at layer 1), 3 tokens, k = 3
    #   192 + 2·3·3·4 = 72 + 192 -> 456, times 0.5 -> 228
    # heads Linear(4, 2): the exit head on layer 1 for everyone (8), the final head for half (4)
    layers = [Layer(1.0, 6), Layer(0.5, 3)]
    assert layer_macs(6, d, d_ff, w) == 960 and layer_macs(3, d, d_ff, w) == 456
    eat = encoder_flops(layers, d, d_ff, w, heads=[(1, 2), (2, 2)])
    assert eat == 2 * (960 + 228 + 8 + 4)
    # dense: both layers on all 6 tokens, k = 6: 384 + 288 + 384 = 1056 each, and the final head
    dense = encoder_flops([Layer(1.0, 6), Layer(1.0, 6)], d, d_ff, None, heads=[(2, 2)])
    assert dense == 2 * (2 * 1056 + 8)
    assert normalised(eat, dense) == pytest.approx(2400 / 4240)


def test_a_head_outside_the_encoder_is_refused():
    with pytest.raises(ValueError, match="head at layer 3"):
        encoder_flops([Layer(1.0, 4)], 4, 8, heads=[(3, 2)])
    with pytest.raises(ValueError):
        normalised(1.0, 0.0)
