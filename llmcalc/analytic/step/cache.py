"""The step model's caches: the global tables a layout search shares, and the ids standing for big objects in keys."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from .. import kernels


def _cached_in(cache: dict, key: Any, make: Callable[[], Any]) -> Any:
    value = cache.get(key)
    if value is None:
        value = cache[key] = make()
    return value


_CACHES: dict[str, dict] = {"layers": {}, "flops": {}, "params": {}, "acts": {}, "counts": {}, "tokens": {},
                            "kernels": {}, "family": {}, "interned": {}}


def clear_caches() -> None:
    """Forget what earlier predictions cached (benchmarks time a cold search), kernels' tile and wave shares too."""
    for cache in _CACHES.values():
        cache.clear()
    kernels._WAVES.clear()


def _token(obj: Any) -> int:
    """A small int standing for `obj` (a ModelSpec, a Network) in cache keys: hashing a spec's ~60 fields takes 12 us,
    and a layout search builds keys with it thousands of times. The object is kept with its token, so its id is
    not reused while the token stands; an equal object built anew gets its own token (a cache miss, never a wrong
    hit)."""
    entry = _TOKENS.get(id(obj))
    if entry is None:
        entry = _TOKENS[id(obj)] = (obj, len(_TOKENS))
    return entry[1]


_TOKENS = _CACHES["tokens"]  # _token's table (clear_caches empties it in place)


def _interned(value: Any) -> int:
    """A small int standing for `value` (hashable: a stage plan's composition, a tuple of pieces) in cache keys, the
    same for equal values: a key holding it hashes an int instead of nested tuples and frozensets. Drawn from a
    counter that never repeats, so an id is never reused for another value, even after the table is cleared (then
    an equal value gets a new id: a cache miss, never a wrong hit)."""
    table = _CACHES["interned"]
    found = table.get(value)
    if found is None:
        if len(table) > 200_000:
            table.clear()
        found = table[value] = next(_IDS)
    return found


_IDS = itertools.count()  # _interned's ids


def _cached(name: str, key: Any, make: Callable[[], Any]) -> Any:
    cache = _CACHES[name]
    value = cache.get(key, _MISSING)  # one lookup: hashing a long key twice costs a layout search ~5 %
    if value is _MISSING:
        if len(cache) > 200_000:
            cache.clear()
        value = cache[key] = make()
    return value


_MISSING = object()  # _cached's "not cached" (None is a value some caches hold)
