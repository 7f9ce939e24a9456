"""The public API is annotated, every hint resolves, and the return hints are true.

Public means: Tensor, Function and Context, Module and Parameter with every layer, container
and loss of `minitensor.nn`, the optimizers and schedulers, each public function of
`minitensor.functional` and of the creators, every function `mt.__all__` names (gradcheck,
no_grad, manual_seed, save, ...), and `autograd.backward` / `backward_steps`. A method counts
when a minitensor class defines it (inherited ones too) and its name is public or a dunder
the class writes itself (``__init__``, ``__add__``, ...).

Hints are resolved with `typing.get_type_hints` in their own module. A name imported only
under ``if TYPE_CHECKING:`` (to break an import cycle) is given here, in TYPE_CHECKING_ONLY.
"""

import collections.abc
import importlib
import inspect
import pathlib
import types
import typing

import numpy as np
import pytest

import minitensor as mt
import minitensor.autograd
import minitensor.creation
import minitensor.functional as F
import minitensor.optim.lr_scheduler as lr_scheduler
from minitensor import nn

TYPE_CHECKING_ONLY = {"Context": mt.Context, "Tensor": mt.Tensor}
PACKAGE = str(pathlib.Path(mt.__file__).parent)


def _public_classes():
    classes = [mt.Tensor, mt.device, mt.Function, mt.Context, mt.optim.Optimizer]
    for module in (nn, mt.optim, lr_scheduler):
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and obj.__module__.startswith("minitensor")
                and not issubclass(obj, BaseException)
            ):
                classes.append(obj)
    return sorted(set(classes), key=lambda c: (c.__module__, c.__name__))


def _methods(cls):
    """The methods of cls written in minitensor's source (not those namedtuple generates)."""
    for where, fn, bound in _all_methods(cls):
        if fn.__code__.co_filename.startswith(PACKAGE):
            yield where, fn, bound


def _all_methods(cls):
    """(qualified name, function, whether its first parameter is self/cls) of every method
    a minitensor class in cls's MRO defines."""
    for klass in cls.__mro__:
        if not klass.__module__.startswith("minitensor"):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                continue
            where = f"{klass.__module__}.{klass.__qualname__}.{name}"
            if isinstance(attr, staticmethod):
                yield where, attr.__func__, False
            elif isinstance(attr, classmethod):
                yield where, attr.__func__, True
            elif isinstance(attr, property):
                for accessor in (attr.fget, attr.fset):
                    if accessor is not None:
                        yield where, accessor, True
            elif inspect.isfunction(attr):
                yield where, attr, True


def _functions():
    for module in (F, minitensor.creation):
        for name, obj in vars(module).items():
            if (
                not name.startswith("_")
                and inspect.isfunction(obj)
                and (module is F or obj.__module__ == module.__name__)
            ):
                yield f"{module.__name__}.{name}", obj, False
    for name in mt.__all__:
        if inspect.isfunction(getattr(mt, name)):
            yield f"mt.{name}", getattr(mt, name), False
    for fn in (minitensor.autograd.backward, minitensor.autograd.backward_steps):
        yield f"minitensor.autograd.{fn.__name__}", fn, False


def _problems(where, fn, bound):
    """What is missing or broken in fn's annotations ([] when it is fully annotated)."""
    try:
        hints = typing.get_type_hints(fn, localns=TYPE_CHECKING_ONLY)
    except Exception as e:  # a name that does not resolve, or a malformed hint
        return [f"{where}: a hint does not resolve ({type(e).__name__}: {e})"]
    params = list(inspect.signature(fn).parameters)[1 if bound else 0 :]
    missing = [p for p in params if p not in hints] + ([] if "return" in hints else ["return"])
    return [f"{where}: no annotation for {', '.join(missing)}"] if missing else []


def test_the_check_finds_a_missing_annotation_and_a_hint_that_does_not_resolve():
    def bare(x, y: int):
        return x

    def unknown(x: "NoSuchType") -> int:  # noqa: F821
        return 0

    def full(x: int, *args: int, **kwargs: str) -> None:
        pass

    assert _problems("bare", bare, False) == ["bare: no annotation for x, return"]
    assert "does not resolve" in _problems("unknown", unknown, False)[0]
    assert _problems("full", full, False) == []
    assert _problems("method", lambda self: None, True) == ["method: no annotation for return"]


def test_the_walk_covers_the_public_api():
    names = {where for cls in _public_classes() for where, _, _ in _methods(cls)}
    names |= {where for where, _, _ in _functions()}
    for expected in (
        "minitensor.tensor.Tensor.softmax",
        "minitensor.tensor.Tensor.__add__",
        "minitensor.function.Function.apply",
        "minitensor.function.Context.where",
        "minitensor.nn.module.Module.parameters",
        "minitensor.nn.layers.Linear.forward",
        "minitensor.nn.attention.MultiheadAttention.forward",
        "minitensor.optim.adam.Adam.__init__",
        "minitensor.functional.softmax",
        "minitensor.optim.lr_scheduler.NoamLR.lr_at",
        "minitensor.creation.randn",
        "minitensor.autograd.backward_steps",
        "mt.gradcheck",
        "mt.no_grad",
    ):
        assert expected in names
    assert len(names) > 400


@pytest.mark.parametrize("cls", _public_classes(), ids=lambda c: c.__name__)
def test_every_public_method_is_annotated(cls):
    problems = [p for where, fn, bound in _methods(cls) for p in _problems(where, fn, bound)]
    assert not problems, "\n".join(problems)


def test_every_public_function_is_annotated():
    problems = [p for where, fn, bound in _functions() for p in _problems(where, fn, bound)]
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------- the return hints are true


def _conforms(value, hint):
    """Does `value` fit `hint`? Classes, unions, None, Any, list[X], tuple[X, ...], tuple[X, Y],
    Iterator[X] (its first item) and dict[K, V] — what the public API's return hints use."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_conforms(v, args[0]) for v in value)
        return len(value) == len(args) and all(_conforms(v, a) for v, a in zip(value, args))
    if origin is dict:
        return isinstance(value, dict) and all(
            _conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items()
        )
    if origin is collections.abc.Iterator:
        return isinstance(value, collections.abc.Iterator) and _conforms(next(value), args[0])
    return isinstance(value, origin or hint)


def _returns(fn):
    return typing.get_type_hints(fn, localns=TYPE_CHECKING_ONLY)["return"]


def _calls():
    """(function, a call of it) for the returns that are not simply a Tensor."""
    mt.manual_seed(0)
    x = mt.randn(3, 4, requires_grad=True)
    model = nn.Sequential(nn.Linear(4, 2), nn.ReLU())
    opt = mt.optim.SGD(model.parameters(), lr=0.1)
    sched = lr_scheduler.StepLR(opt, step_size=2)
    attention = nn.MultiheadAttention(4, 2)
    q = mt.randn(5, 1, 4)
    return [
        (F.max, lambda: F.max(x, 1)),
        (F.max, lambda: F.max(x)),
        (F.min, lambda: F.min(x, 0)),
        (F.split, lambda: F.split(x, 2, 1)),
        (F.chunk, lambda: F.chunk(x, 3)),
        (F.sort, lambda: F.sort(x)),
        (F.topk, lambda: F.topk(x, 2)),
        (F.nonzero, lambda: F.nonzero(x > 0)),
        (F.nonzero, lambda: F.nonzero(x > 0, True)),
        (F.allclose, lambda: F.allclose(x, x)),
        (F.cast, lambda: F.cast(x, mt.int64)),
        (mt.Tensor.size, lambda: x.size()),
        (mt.Tensor.size, lambda: x.size(1)),
        (mt.Tensor.item, lambda: x.sum().item()),
        (mt.Tensor.tolist, lambda: x.tolist()),
        (mt.Tensor.tolist, lambda: x[0, 0].tolist()),
        (mt.Tensor.type, lambda: x.type()),
        (mt.Tensor.type, lambda: x.type(mt.float64)),
        (mt.Tensor.max, lambda: x.max(1)),
        (mt.Tensor.split, lambda: x.split(2)),
        (mt.Tensor.__iter__, lambda: iter(x)),
        (mt.Tensor.backward_steps, lambda: (x * x).sum().backward_steps()),
        (mt.Tensor.__array__, lambda: np.asarray(x)),
        (mt.Tensor.numpy, lambda: x.numpy()),
        (mt.Tensor.grad_fn.fget, lambda: (x * 2).grad_fn),
        (mt.Tensor.grad_fn.fget, lambda: x.grad_fn),
        (mt.Context.parents.fget, lambda: (x * 2 + 1).grad_fn.parents),
        (mt.Context.saved_tensors.fget, lambda: x.exp().grad_fn.saved_tensors),
        (nn.Module.parameters, lambda: model.parameters()),
        (nn.Module.named_parameters, lambda: model.named_parameters()),
        (nn.Module.named_modules, lambda: model.named_modules()),
        (nn.Module.state_dict, lambda: model.state_dict()),
        (nn.Module.load_state_dict, lambda: model.load_state_dict(model.state_dict())),
        (nn.Module.train, lambda: model.train()),
        (nn.Module.to, lambda: model.to(mt.float32)),
        (nn.Sequential.__getitem__, lambda: model[0]),
        (nn.Sequential.__getitem__, lambda: model[:1]),
        (nn.MultiheadAttention.forward, lambda: attention(q, q, q)),
        (nn.MultiheadAttention.forward, lambda: attention(q, q, q, need_weights=False)),
        (mt.optim.Optimizer.state_dict, lambda: opt.state_dict()),
        (lr_scheduler.LRScheduler.get_last_lr, lambda: sched.get_last_lr()),
        (lr_scheduler.StepLR.lr_at, lambda: sched.lr_at(0.1, 3)),
        (
            mt.gradcheck,
            lambda: mt.gradcheck(F.exp, mt.randn(3, dtype=mt.float64, requires_grad=True)),
        ),
        (minitensor.creation.from_numpy, lambda: mt.from_numpy(np.zeros(2))),
    ]


def test_return_hints_hold_for_calls_that_do_not_simply_return_a_tensor():
    wrong = []
    for fn, call in _calls():
        value, hint = call(), _returns(fn)
        if not _conforms(value, hint):
            wrong.append(f"{fn.__qualname__} returned {type(value).__name__}, hinted {hint}")
    assert not wrong, "\n".join(wrong)


def test_conforms_can_fail():
    assert not _conforms([1, "a"], list[int])
    assert not _conforms((1, 2), tuple[int])
    assert not _conforms(None, int | str)
    assert _conforms(iter([mt.tensor(1.0)]), collections.abc.Iterator[mt.Tensor])


# ----------------------------------------------------------------- transformer's public API

# The transformer modules whose public functions and methods carry the core's hints (all of
# them; transformer.tasks, the demo tasks' data, is not walked yet).
TRANSFORMER_ANNOTATED = (
    "transformer.attention",
    "transformer.config",
    "transformer.decoding",
    "transformer.embeddings",
    "transformer.interop",
    "transformer.layers",
    "transformer.masks",
    "transformer.models",
    "transformer.tokenizer",
    "transformer.training",
    "transformer.viz",
)
# layers.py names LayerCache (transformer.models) under TYPE_CHECKING: models imports layers
TYPE_CHECKING_ONLY["LayerCache"] = importlib.import_module("transformer.models").LayerCache


def _transformer_api(module_name):
    """(where, function, bound) of each public function and public (or dunder) method of a
    public class that the transformer module `module_name` defines."""
    module = importlib.import_module(module_name)
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
            continue
        if inspect.isfunction(obj):
            yield f"{module_name}.{name}", obj, False
        elif isinstance(obj, type):
            for attr_name, attr in vars(obj).items():
                if attr_name.startswith("_") and not attr_name.startswith("__"):
                    continue
                where = f"{module_name}.{name}.{attr_name}"
                if isinstance(attr, (staticmethod, classmethod)):
                    yield where, attr.__func__, isinstance(attr, classmethod)
                elif isinstance(attr, property):
                    yield where, attr.fget, True
                elif inspect.isfunction(attr) and attr.__code__.co_filename == module.__file__:
                    yield where, attr, True


@pytest.mark.parametrize("module_name", TRANSFORMER_ANNOTATED)
def test_transformer_public_api_is_annotated(module_name):
    found = list(_transformer_api(module_name))
    assert found
    problems = [p for where, fn, bound in found for p in _problems(where, fn, bound)]
    assert not problems, "\n".join(problems)


def test_the_transformer_walk_sees_methods_and_functions():
    names = {w for m in TRANSFORMER_ANNOTATED for w, _, _ in _transformer_api(m)}
    for expected in (
        "transformer.layers.DecoderLayer.forward",
        "transformer.layers.FeedForward.__init__",
        "transformer.masks.combine_masks",
        "transformer.config.TransformerConfig.small",
        "transformer.embeddings.RotaryEmbedding.forward",
    ):
        assert expected in names
