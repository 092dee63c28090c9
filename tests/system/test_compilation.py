"""common.compilation: the pointwise chain, eager vs compiled timing, where eager time goes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from common.compilation import (
    CompileTiming,
    chain_inputs,
    cpp_compiler,
    eager_vs_compiled,
    median_ms,
    pointwise_chain,
    time_by_layer_type,
)


def test_pointwise_chain_is_eval_batchnorm_then_half_silu():
    x, mean, inv_std, weight, bias = chain_inputs(2, 3, 4)
    eps = 1e-5  # batch_norm divides by sqrt(var + eps): choose var so that this is 1 / inv_std
    expected = nn.functional.batch_norm(x, mean.flatten(), inv_std.flatten() ** -2 - eps,
                                        weight.flatten(), bias.flatten(), training=False, eps=eps)
    torch.testing.assert_close(pointwise_chain(x, mean, inv_std, weight, bias),
                               nn.functional.silu(expected) * 0.5)
    assert x.shape == (2, 3, 4, 4) and torch.equal(chain_inputs(2, 3, 4)[0], x)


def test_cpp_compiler_follows_cxx(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert cpp_compiler() is None
    monkeypatch.setenv("CXX", "sh")
    assert cpp_compiler() is not None and cpp_compiler().endswith("sh")


def test_speedup_is_eager_over_compiled():
    assert CompileTiming(1.0, eager_ms=6.0, compiled_ms=2.0).speedup == pytest.approx(3.0)


@pytest.mark.skipif(cpp_compiler() is None, reason="Inductor needs a C++ compiler on the CPU")
def test_eager_vs_compiled_times_both_and_computes_the_same():
    args = chain_inputs(2, 4, 8)
    timing, eager, compiled = eager_vs_compiled(pointwise_chain, *args, repeats=3)
    torch.testing.assert_close(compiled, eager)
    assert timing.first_call_s > timing.compiled_ms / 1e3 > 0 and timing.eager_ms > 0
    with pytest.raises(ValueError, match="repeats"):
        eager_vs_compiled(pointwise_chain, *args, repeats=0)


def test_time_by_layer_type_shares_and_leaves_no_hooks():
    model = nn.Sequential(nn.Flatten(), nn.Linear(48, 512), nn.ReLU(), nn.Linear(512, 6))
    shares = time_by_layer_type(model, torch.randn(64, 3, 4, 4))
    assert {"Flatten", "Linear", "ReLU", "other"} <= set(shares.index)
    assert shares.sum() == pytest.approx(1.0) and (shares >= 0).all()
    assert shares.index[0] == "Linear", "two matrix products outweigh a ReLU and a view"
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_median_ms_times_without_gradients():
    seen = []

    def record(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.is_grad_enabled())
        return x * 2

    assert median_ms(record, torch.ones(3, requires_grad=True), repeats=3) > 0
    assert seen == [False] * 4, "one warm-up call and three timed ones, all without gradients"
