"""common.fsdp.compilation: the pointwise chain, eager and compiled timed in turn, where eager time goes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from common.fsdp import compilation
from common.fsdp.compilation import (
    chain_inputs,
    compare_ms,
    cpp_compiler,
    median_ms,
    pointwise_chain,
    time_by_layer_type,
)
from tests.system_parts import require


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


def test_compare_ms_alternates_after_one_warm_up_each():
    calls = []

    def named(name: str):
        def fn(x: torch.Tensor) -> torch.Tensor:
            calls.append((name, torch.is_grad_enabled()))
            return x + 1
        return fn

    medians = compare_ms({"a": named("a"), "b": named("b")}, torch.ones(2, requires_grad=True), repeats=2)
    assert set(medians) == {"a", "b"} and all(ms > 0 for ms in medians.values())
    assert calls == [("a", False), ("b", False)] * 3, "warm-ups, then rounds that call each in turn"
    with pytest.raises(ValueError, match="repeats"):
        compare_ms({"a": named("a")}, torch.ones(1), repeats=0)


def test_compare_ms_times_a_compiled_function_that_computes_the_same():
    require("a C++ compiler", None if cpp_compiler() else "Inductor needs one on the CPU: make system-deps installs g++")
    args = chain_inputs(2, 4, 8)
    compiled = torch.compile(pointwise_chain)
    medians = compare_ms({"eager": pointwise_chain, "compiled": compiled}, *args, repeats=3)
    assert medians["eager"] > 0 and medians["compiled"] > 0
    torch.testing.assert_close(compiled(*args), pointwise_chain(*args))


def test_time_by_layer_type_shares_and_leaves_no_hooks():
    model = nn.Sequential(nn.Flatten(), nn.Linear(48, 512), nn.ReLU(), nn.Linear(512, 6))
    shares = time_by_layer_type(model, torch.randn(64, 3, 4, 4))
    assert {"Flatten", "Linear", "ReLU", "other"} <= set(shares.index)
    assert shares.sum() == pytest.approx(1.0) and (shares >= 0).all()
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_time_by_layer_type_gives_each_kind_its_time_and_the_rest_to_other(monkeypatch):
    """The shares of a clock that only the layers and their parent advance, so exact (no timing)."""
    clock = [0.0]
    monkeypatch.setattr(compilation, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    class Takes(nn.Module):
        def __init__(self, seconds: float) -> None:
            super().__init__()
            self.seconds = seconds

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            clock[0] += self.seconds
            return x

    class Slow(Takes):
        pass

    class Fast(Takes):
        pass

    class Outer(nn.Module):  # 4 s of its own per pass, outside every leaf: "other"
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(Slow(3.0), Fast(1.0), Slow(2.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            clock[0] += 4.0
            return self.body(x)

    shares = time_by_layer_type(Outer(), torch.zeros(1), repeats=3)
    assert shares.to_dict() == pytest.approx({"Slow": 0.5, "other": 0.4, "Fast": 0.1})
    assert list(shares.index) == ["Slow", "other", "Fast"], "largest share first"


def test_median_ms_times_without_gradients():
    seen = []

    def record(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.is_grad_enabled())
        return x * 2

    assert median_ms(record, torch.ones(3, requires_grad=True), repeats=3) > 0
    assert seen == [False] * 4, "one warm-up call and three timed ones, all without gradients"
