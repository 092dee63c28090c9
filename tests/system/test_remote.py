"""course.grading.inside (channel, codec, remote): only data crosses from an answer to its checker, and the
checker sees what the answer's calls did as if they had run in its own process."""

from __future__ import annotations

import os
import pathlib
import pickle
import socket
from collections import OrderedDict

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from course.grading.inside.answer import Server
from course.grading.inside.channel import ChannelError, Handle, loads_plain
from course.grading.inside.codec import decode, encode
from course.grading.inside.remote import Answer, Remote


def _round_trip(value):
    handles = []
    tree = encode(value, lambda obj: handles.append(obj) or len(handles), lambda obj: None)
    return decode(loads_plain(pickle.dumps(tree)), lambda h: h, lambda p: p)


class _Mkdir:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_the_plain_unpickler_refuses_every_global_and_runs_nothing(tmp_path):
    for payload in (pickle.dumps(_Mkdir(str(tmp_path / "pwned"))), pickle.dumps(os.system),
                    pickle.dumps(torch.ones(2)), pickle.dumps(np.ones(2))):
        with pytest.raises(ChannelError):
            loads_plain(payload)
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(ChannelError):
        loads_plain(b"\x80\x05garbage")


def test_data_comes_back_with_its_exact_types():
    image = Image.new("RGB", (3, 2), (10, 20, 30))
    read_only = np.arange(6, dtype=np.uint8).reshape(2, 3)
    read_only.flags.writeable = False
    value = {"t": torch.arange(6.0).reshape(2, 3).requires_grad_(), "b": torch.tensor([True, False]),
             "h": torch.ones(2, dtype=torch.bfloat16), "e": torch.empty(0, 3), "s": torch.tensor(3),
             "a": read_only, "n": (np.str_("x"), np.int64(4)), "p": pathlib.Path("a/b"),
             "z": torch.Size([2, 3]), "d": torch.float64, "o": OrderedDict(k=1), "set": {1, 2},
             "c": 1 + 2j, "dots": ..., "img": image}
    back = _round_trip(value)
    assert torch.equal(back["t"], value["t"]) and back["t"].requires_grad and type(back["t"]) is torch.Tensor
    assert back["b"].dtype == torch.bool and back["h"].dtype == torch.bfloat16 and back["e"].shape == (0, 3)
    assert back["s"].shape == () and back["s"].item() == 3
    assert np.array_equal(back["a"], read_only) and not back["a"].flags.writeable
    assert type(back["n"][0]) is np.str_ and type(back["n"][1]) is np.int64
    assert back["p"] == pathlib.Path("a/b") and back["z"] == (2, 3) and back["d"] is torch.float64
    assert type(back["o"]) is OrderedDict and back["set"] == {1, 2} and back["c"] == 1 + 2j
    assert back["dots"] is Ellipsis and np.array_equal(np.asarray(back["img"]), np.asarray(image))


def test_values_of_the_students_own_classes_arrive_plain_and_other_objects_as_handles():
    class Anything(float):
        def __eq__(self, other):
            return True

    class Point(tuple):
        def __eq__(self, other):
            return True

    back = _round_trip([Anything(1.0), Point((1, 2)), object()])
    assert type(back[0]) is float and back[0] == 1.0 and back[0] != 2.0, "the value, not its __eq__"
    assert type(back[1]) is tuple and back[1] == (1, 2) and back[1] != (3,)
    assert type(back[2]) is Handle


@pytest.mark.parametrize("tree", [("T", "float32", (2,), b"abc", False, "cpu"), ("Q",), ("t", "manual_seed"),
                                  ("T", "float32", (4096,), b"", False, "cpu"), ["H", 1, []],
                                  ("A", "<f8", (64,), b"", True), ("a", "<i8", b"\0"),
                                  ("A", "|O", (1,), b"\0" * 8, True), ("L", "not a list"), ("H", "x", [])])
def test_malformed_values_are_refused(tree):
    with pytest.raises(ChannelError):
        decode(tree, lambda h: h, lambda p: p)


_ANSWERS = '''
import torch
from torch import nn


class Anything:
    def __eq__(self, other):
        return True

    def __bool__(self):
        return True


def anything():
    return Anything()


def no_trace(w, model, optimizer, generator):
    w.grad = torch.ones_like(w)
    model.eval()
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    torch.rand(3, generator=generator)
    return "done"


def draws():
    return torch.rand(2)


def reseed():
    torch.manual_seed(0)


def drive(step, batches):
    return [step(b) for b in batches]


def attribute(obj, name):
    return getattr(obj, name)


class Dispatch:
    """torch's and NumPy's protocols, each answering "equal" (or the checker's own arguments)."""
    seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        Dispatch.seen.append(args)
        return True

    def __array__(self, dtype=None, copy=None):
        import numpy
        return numpy.zeros(3)

    @property
    def __array_interface__(self):
        return {"shape": (3,), "typestr": "<f8", "data": (0, False), "version": 3}

    def __fspath__(self):
        return "/etc/passwd"


def dispatch():
    return Dispatch()


class AlwaysEqual(torch.Tensor):
    def __eq__(self, other):
        return torch.ones_like(self, dtype=torch.bool)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True


def tensor_subclass():
    return AlwaysEqual(torch.tensor([9.0, 9.0]))


class Claims:
    pass


def claiming(module, qualname):
    Claims.__module__, Claims.__qualname__ = module, qualname
    return Claims()


def seen():
    return len(Dispatch.seen)


def fails(kind):
    class Mine(KeyError):
        pass
    raise {"value": ValueError("bad value"), "key": Mine("k"), "exit": SystemExit(3)}[kind]
'''


@pytest.fixture()
def answer():
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the answer process
        try:
            ours.close()
            namespace = {}
            exec(_ANSWERS, namespace)  # the test's own answers
            Server(theirs, namespace, lambda: []).loop()
        finally:
            os._exit(0)
    theirs.close()
    answer = Answer(ours)
    yield answer, answer.request("names", 0, (["anything", "no_trace", "draws", "drive", "fails", "attribute", "reseed",
                                                 "dispatch", "tensor_subclass", "claiming", "seen"],))
    ours.close()
    os.waitpid(pid, 0)


def test_a_handle_neither_compares_nor_converts(answer):
    _, names = answer
    fake = names["anything"]()
    assert type(fake) is Remote and not isinstance(fake, float)
    assert fake != 1 and not (fake == 1), "== is identity: an object that equals anything equals nothing"
    with pytest.raises(TypeError):
        bool(fake)
    with pytest.raises(TypeError):
        float(fake)


def test_what_a_call_does_to_its_arguments_comes_back(answer):
    _, names = answer
    w = torch.zeros(2, requires_grad=True)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    before = model.weight.detach().clone()
    assert names["no_trace"](w, model, optimizer, generator) == "done"
    assert torch.equal(w.grad, torch.ones(2)) and not model.training
    assert torch.equal(model.weight.grad, torch.ones(1, 2))
    assert torch.allclose(model.weight, before - 1.0), "the optimizer's step"
    assert optimizer.state_dict()["state"][0]["momentum_buffer"] is not None
    assert not torch.equal(generator.get_state(), torch.Generator().manual_seed(0).get_state())


def test_the_checkers_seed_reaches_the_answer_and_nothing_comes_back(answer):
    _, names = answer
    torch.manual_seed(7)
    drawn = names["draws"]()
    torch.manual_seed(7)
    assert torch.equal(drawn, torch.rand(2)), "a check's seed seeds the answer's draws"
    torch.manual_seed(3)
    names["draws"]()
    names["reseed"]()  # the answer sets its generator: the checker's is its own
    after = torch.rand(1)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(1)), "the answer cannot choose the checks' next inputs"
    torch.manual_seed(1)
    assert torch.equal(names["draws"](), names["draws"]()), "each call starts from the checker's state"


def test_the_checkers_functions_and_generators_are_called_back(answer):
    _, names = answer
    seen = []

    def step(batch):
        seen.append(batch)
        return batch * 10

    assert names["drive"](step, (i for i in range(3))) == [0, 10, 20] and seen == [0, 1, 2]


def test_the_checkers_objects_show_their_methods_and_data_only(answer):
    _, names = answer

    class Clock:
        def __init__(self):
            self.now = 2.0

        def tick(self, by):
            self.now += by
            return self.now

    clock = Clock()
    assert names["drive"](clock.tick, [1.0, 0.5]) == [3.0, 3.5] and clock.now == 3.5
    generator = (i for i in range(2))
    with pytest.raises((AttributeError, RuntimeError), match="frame"):  # frames do not travel
        names["attribute"](generator, "gi_frame")
    with pytest.raises(AttributeError):
        names["attribute"](clock.tick, "__globals__")
    assert names["attribute"](clock, "now") == 3.5


def test_exceptions_arrive_as_the_checkers_own_classes(answer):
    _, names = answer
    with pytest.raises(ValueError, match="bad value"):
        names["fails"]("value")
    with pytest.raises(KeyError):
        names["fails"]("key")
    with pytest.raises(RuntimeError, match="SystemExit"):
        names["fails"]("exit")


def test_torch_and_numpy_never_dispatch_to_an_answers_object(answer):
    answer, names = answer
    obj = names["dispatch"]()
    assert type(obj) is Remote and not torch.overrides.has_torch_function((obj,))
    for protocol in ("__torch_function__", "__array_interface__", "__array__", "__fspath__", "__class_getitem__"):
        with pytest.raises(AttributeError):
            getattr(obj, protocol)
    for attempt in (lambda: torch.allclose(obj, torch.zeros(3)), lambda: torch.equal(torch.zeros(3), obj),
                    lambda: torch.add(obj, 1), lambda: np.add(obj, 1), lambda: os.fspath(obj)):
        with pytest.raises(TypeError):
            attempt()
    assert (torch.zeros(3) == obj) is False and np.asarray(obj).dtype == object, "no data from a protocol"
    assert names["seen"]() == 0, "the checker's tensors never reached the answer's __torch_function__"
    assert isinstance(obj.__dict__, dict), "__dict__ is data and may be read"


def test_a_tensor_subclass_arrives_as_a_plain_tensor_of_its_data(answer):
    answer, names = answer
    got = names["tensor_subclass"]()
    assert type(got) is torch.Tensor and torch.equal(got, torch.tensor([9.0, 9.0]))
    assert not torch.allclose(got, torch.zeros(2)) and not torch.equal(got, torch.zeros(2))
    assert names["seen"]() == 0


@pytest.mark.parametrize(("module", "qualname"), [("torch", "Tensor"), ("torch.nn.parameter", "Parameter"),
                                                  ("numpy", "ndarray"), ("numpy", "float64"),
                                                  ("PIL.Image", "Image"), ("torch._C", "Generator"),
                                                  ("builtins", "float"), ("collections", "OrderedDict")])
def test_a_handle_never_claims_a_class_that_c_code_unpacks(answer, module, qualname):
    """A class named torch.Tensor made the checker read a handle as a tensor's memory (SIGSEGV)."""
    answer, names = answer
    obj = names["claiming"](module, qualname)
    assert type(obj) is Remote and obj.__class__ is Remote
    with pytest.raises(TypeError):
        torch.allclose(obj, torch.zeros(1))
    with pytest.raises(TypeError):
        torch.as_tensor(np.zeros(1)).add_(obj)


def test_a_handle_may_still_claim_a_pure_python_library_class(answer):
    answer, names = answer
    obj = names["claiming"]("torch.nn.modules.module", "Module")
    assert isinstance(obj, nn.Module) and type(obj) is Remote
