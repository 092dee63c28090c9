"""Device choice and seeding."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from common.device import describe_device, get_device, seed_everything


def test_seed_everything_makes_all_generators_repeat():
    def draw():
        return random.random(), np.random.rand(), torch.rand(1).item()

    seed_everything(123)
    first = draw()
    seed_everything(123)
    assert draw() == first
    seed_everything(124)
    assert draw() != first


def test_returned_generator_is_seeded():
    a = torch.rand(3, generator=seed_everything(5))
    b = torch.rand(3, generator=seed_everything(5))
    assert torch.equal(a, b)


def test_negative_seed_is_refused():
    with pytest.raises(ValueError, match="non-negative"):
        seed_everything(-1)


def test_get_device_prefers_cuda_when_present():
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available()
                                                          else "cpu")
    assert get_device().type == expected


def test_environment_variable_forces_the_cpu(monkeypatch):
    monkeypatch.setenv("COMPANION_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_unavailable_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        get_device("cuda")


@pytest.mark.parametrize("threads, words", [(1, "1 thread"), (2, "2 threads"), (8, "8 threads")])
def test_describe_device_names_the_cpu_threads(threads, words):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert describe_device(torch.device("cpu")) == f"cpu ({words})"
    finally:
        torch.set_num_threads(before)
