"""One way to cache (issue 37): memo tables that live for one call.

`predict` and the layout search (`search_layouts`) each open the tables of their call (``per_call``); everything the
step engine memoizes while they run goes there and is dropped when the call returns, so that nothing one call
computed can reach another (a search's predictions share the search's tables). Outside such a call (a helper
called alone) each lookup finds fresh tables: it computes, it keeps nothing.

The memo points are named, each keyed by a frozen record of what its function reads (docs/architecture.md, "One
way to cache"): a linear's three GEMMs (``context.GemmInputs`` and the shape), a layer's cost (``layer.LayerKey``),
a stage's cost (``stages.StageKey``) and a pipeline rank's data-parallel and optimizer cost (``dp.RankDpKey``); the
inputs every one of them shares, the model, device, sequence, recipe, attention and kernel efficiency, are the
``context.StepInputs`` whose tables they are kept in. The rest are the call's bookkeeping (stage plans, FLOPs,
the search's floors and its memory checks), kept in the same tables under the name of what they hold."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from .. import kernels

F = TypeVar("F", bound=Callable[..., Any])


class Tables:
    """The memo tables of one call: a dict per name (``table``), and per object (a ModelSpec: ``of``)."""

    def __init__(self) -> None:
        self.named: dict[str, dict] = {}

    def table(self, name: str) -> dict:
        found = self.named.get(name)
        if found is None:
            found = self.named[name] = {}
        return found

    def of(self, obj: Any, name: str) -> dict:
        """The table `name` of one object (a ModelSpec: what a call memoizes of one model), found by the object's
        identity and kept with it, so that its id is not reused while the tables stand."""
        table = self.table(name)
        entry = table.get(id(obj))
        if entry is None:
            entry = table[id(obj)] = (obj, {})
        return entry[1]


_OPEN: list[Tables] = []  # the tables of the calls running now (the outermost first)


def current() -> Tables:
    """The tables of the call running now; outside one, fresh tables that nothing keeps."""
    return _OPEN[-1] if _OPEN else Tables()


def per_call(function: F) -> F:
    """`function` runs in the tables of the call it is part of, or, called alone, in its own, dropped when it
    returns."""
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _OPEN:
            return function(*args, **kwargs)
        _OPEN.append(Tables())
        try:
            return function(*args, **kwargs)
        finally:
            _OPEN.pop()
    return wrapper  # type: ignore[return-value]


def clear_caches() -> None:
    """Forget the kernels' tile and wave shares (benchmarks time a cold search); the step engine's own tables are
    the running call's and go with it."""
    kernels._WAVES.clear()


def _cached_in(cache: dict, key: Any, make: Callable[[], Any]) -> Any:
    value = cache.get(key, _MISSING)
    if value is _MISSING:
        value = cache[key] = make()
    return value


_MISSING = object()  # "not cached" (None is a value some tables hold)
