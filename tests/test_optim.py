"""The one optimizer/schedule factory: parameter groups, fused selection, and the two warmup conventions (known
answers, and transformers' own schedule as the reference for hf=True)."""
import pytest
import torch
from torch import nn

from experiments.optim import adamw, linear_schedule, param_groups, warmup_steps


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(4, 2)  # weight decays, bias does not
        self.LayerNorm = nn.LayerNorm(2)  # BERT's name: neither weight nor bias decays
        self.frozen = nn.Linear(2, 2)
        self.frozen.requires_grad_(False)  # frozen: in no group


def lrs(sched, opt, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_no_weight_decay_on_biases_and_norms_and_frozen_weights_left_out():
    net = Net()
    decay, no_decay = param_groups(net, 0.01)
    assert decay["params"] == [net.dense.weight] and decay["weight_decay"] == 0.01
    assert no_decay["params"] == [net.dense.bias, net.LayerNorm.weight, net.LayerNorm.bias]
    assert no_decay["weight_decay"] == 0.0


def test_adamw_is_fused_only_for_a_cpu_or_cuda_device_and_refuses_a_frozen_model():
    net = Net()
    opt = adamw(net, 1e-3, 0.01, torch.device("cpu"))
    assert opt.defaults["fused"] is True and opt.defaults["lr"] == 1e-3
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert not adamw(net, 1e-3, 0.0).defaults["fused"]
    with pytest.raises(ValueError, match="no trainable parameters"):
        adamw(nn.Linear(2, 2).requires_grad_(False), 1e-3, 0.0)


def test_suite_schedule_warms_up_without_a_zero_step_then_decays_to_zero():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    got = lrs(linear_schedule(opt, warmup=4, total=10), opt, 10)
    assert got == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])
    assert opt.param_groups[0]["lr"] == 0


@pytest.mark.parametrize("warmup, total", [(4, 10), (0, 5), (3, 3)])
def test_hf_schedule_equals_transformers(warmup, total):
    from transformers import get_linear_schedule_with_warmup
    a = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2e-4)
    b = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2e-4)
    ours = lrs(linear_schedule(a, warmup, total, hf=True), a, total + 1)
    ref = lrs(get_linear_schedule_with_warmup(b, warmup, total), b, total + 1)
    assert ours == pytest.approx(ref, abs=0)
    if 0 < warmup < total:  # the first step has lr 0, the peak comes right after the warmup
        assert ours[0] == 0.0 and ours[warmup] == 2e-4


def test_warmup_steps_round_as_each_recipe_does_and_bad_values_are_named():
    assert warmup_steps(0.1, 25) == 2 and warmup_steps(0.1, 25, hf=True) == 3  # 2.5 -> down (suite), up (HF)
    assert warmup_steps(0.0, 7) == 0 and warmup_steps(1.0, 7, hf=True) == 7
    with pytest.raises(ValueError, match="warmup_ratio=1.5"):
        warmup_steps(1.5, 10)
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="warmup=11, total=10"):
        linear_schedule(opt, 11, 10)
