"""``dataclass`` for llmcalc's own records: ``dataclasses.dataclass`` with the same methods, made cheaper to create.

Why: on CPython 3.11 ``dataclasses.dataclass`` compiles source text for six methods of every frozen class
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``); with some 30 records a
command and ~100 fields in the spec's two, that compiling was more than half of a command's start-up beyond click
(issue 24). Here ``dataclasses.dataclass`` still makes the class, its fields and the one method that must be compiled
(``__init__``); ``__repr__``, ``__eq__`` and ``__hash__`` are instead closures over the field names, and so are a
frozen class's ``__setattr__`` and ``__delattr__`` (on CPython 3.10-3.12, whose ``dataclasses`` builds them in
``_frozen_get_del_attr(cls, fields, globals)``: ``record`` has it make the closures while it makes the class;
3.13 compiles all methods in one go and is left alone). The ``__init__`` text is compiled once per machine: its
code object is kept in ``$LLMCALC_CACHE_DIR/records`` (default ``~/.cache/llmcalc/records``) and read back by later
processes, as Python keeps a module's bytecode in __pycache__ (``compiled``; the spec's two ~95-argument
``__init__``s were some 10 % of a command's instructions). ``construct(cls, values)`` makes what ``cls(**values)``
makes without running that __init__ (the field values stored in field order, then ``__post_init__``): the spec's
two records are built so, a preset at a time.

Why it is exact: each closure computes what the generated method does, from the same fields, in the same cases:
``__eq__`` compares the tuples of the compared fields (``f.compare``) when both operands are of the very same class
and answers NotImplemented otherwise; ``__hash__`` follows dataclasses' table (frozen with eq: the hash of the tuple
of the hashed fields, ``f.hash`` or else ``f.compare``; eq without frozen: ``None``, unhashable; a ``__hash__`` the
class defines is kept); ``__repr__`` is ``Name(field=repr, ...)`` over ``f.repr`` fields with the class's
``__qualname__``, guarded against recursion as dataclasses guards it; a method the class body defines is never
replaced; a frozen class's ``__setattr__``/``__delattr__`` raise ``FrozenInstanceError("cannot assign to field
'x'")`` (``delete``) for any name on an instance of the class itself and for a field name on a subclass's, and
otherwise defer to ``super(cls, self)``, as the generated ones do; a cached ``__init__`` is the code object that
compiling its text makes (the same text, under the same interpreter: both are in the file and checked) and is run
as dataclasses runs it. ``order``, ``unsafe_hash`` and ``slots`` go to
``dataclasses.dataclass`` unchanged. tests/test_records.py
holds each behaviour against ``dataclasses.dataclass``'s. For type checkers this *is* ``dataclasses.dataclass``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import marshal
import os
import reprlib
import sys
import zlib
from collections.abc import Callable
from operator import attrgetter
from types import CodeType
from typing import TYPE_CHECKING, Any


def _tuple_of(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """obj -> (obj.a, obj.b, ...): always a tuple, as the generated methods build one (a 1-tuple too)."""
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    if not names:
        return lambda obj: ()
    return attrgetter(*names)


def _methods(cls: Any, own: set[str], *, frozen: bool, repr: bool, eq: bool, explicit_hash: bool) -> None:
    fields = dataclasses.fields(cls)
    if repr and "__repr__" not in own:
        shown = tuple(f.name for f in fields if f.repr)

        def __repr__(self: Any) -> str:
            return f"{self.__class__.__qualname__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in shown) + ")"

        __repr__.__qualname__ = f"{cls.__qualname__}.__repr__"
        cls.__repr__ = reprlib.recursive_repr()(__repr__)
    if not eq:
        return
    if "__eq__" not in own:
        compared = _tuple_of(tuple(f.name for f in fields if f.compare))

        def __eq__(self: Any, other: object) -> Any:
            if other.__class__ is self.__class__:
                return compared(self) == compared(other)
            return NotImplemented

        __eq__.__qualname__ = f"{cls.__qualname__}.__eq__"
        cls.__eq__ = __eq__
    if explicit_hash:
        return
    if not frozen:
        cls.__hash__ = None
        return
    hashed = _tuple_of(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    __hash__.__qualname__ = f"{cls.__qualname__}.__hash__"
    cls.__hash__ = __hash__


def short_repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    """A ``__repr__`` for a big record, a handful of its fields then ``...``: ``ModelSpec(name='llama-3-8b',
    n_layers=32, d_model=4096, ...)``. Set it in the class body (``__repr__ = short_repr(("name", "n_layers"))``): a
    method the body defines is kept (``record``). Guarded against recursion as the full one is."""

    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{self.__class__.__qualname__}({shown}, ...)"

    return reprlib.recursive_repr()(__repr__)


def _frozen_get_del_attr(cls: Any, fields: list, globals: dict) -> tuple[Callable, Callable]:
    """What ``dataclasses._frozen_get_del_attr`` returns (the same checks, messages and fallbacks), as closures."""
    names = tuple(f.name for f in fields)
    FrozenInstanceError = dataclasses.FrozenInstanceError

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


# CPython 3.10-3.12 compile the frozen methods one by one in this helper; 3.13 batches every method in one compile
_FROZEN_HOOK = sys.version_info < (3, 13) and hasattr(dataclasses, "_frozen_get_del_attr")
_UNSET = object()


def _cache_dir() -> str | None:
    """Where compiled __init__ code is kept: ``$LLMCALC_CACHE_DIR/records`` (default ``$XDG_CACHE_HOME/llmcalc`` or
    ``~/.cache/llmcalc``, as the calibrated peaks); None where no home is known."""
    root = os.environ.get("LLMCALC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "llmcalc")
    return None if root.startswith("~") else os.path.join(root, "records")


def compiled(source: str) -> CodeType:
    """``compile(source, "<string>", "exec")`` as ``exec(source)`` does it in dataclasses (no inherited future flags),
    or the same code object read back from the cache where an earlier process compiled this very text under this very
    interpreter: the file holds the interpreter's version, the text and the code (marshal), and is used only when
    both match (else compiled and rewritten). An unreadable, foreign or corrupt file is compiled over; a cache that
    cannot be written (read-only, no space; or ``sys.dont_write_bytecode``, as for bytecode) is only not written."""
    folder = _cache_dir()
    path = folder and os.path.join(folder, f"{zlib.crc32(source.encode()):08x}-{len(source)}.{_TAG}")
    if path:
        try:
            with open(path, "rb") as handle:
                version, text, code = marshal.loads(handle.read())
            if version == sys.version and text == source and isinstance(code, CodeType):
                return code
        except Exception:  # missing, unreadable, truncated or foreign: compile instead
            pass
    code = compile(source, "<string>", "exec", dont_inherit=True)
    if path and folder and not sys.dont_write_bytecode:
        temporary = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(folder, exist_ok=True)
            with open(temporary, "wb") as handle:
                handle.write(marshal.dumps((sys.version, source, code)))
            os.replace(temporary, path)  # whole or not at all, whoever else writes it
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return code


_TAG = sys.implementation.cache_tag or "python"


def _exec(source: Any, globals: dict | None = None, locals: dict | None = None) -> None:
    """``exec`` for dataclasses while ``record`` makes a class: the text's code object from ``compiled``."""
    exec(compiled(source) if isinstance(source, str) else source, globals, locals)


def _dataclass(cls: type, **kwargs: Any) -> type:
    """``dataclasses.dataclass(cls, **kwargs)``, a frozen class's __setattr__/__delattr__ made as closures and the
    generated __init__'s text compiled through the cache (``compiled``): dataclasses' own ``exec`` and, on 3.10-3.12,
    its ``_frozen_get_del_attr`` swapped while it makes the class, and put back."""
    hooks = {"exec": _exec, **({"_frozen_get_del_attr": _frozen_get_del_attr} if kwargs["frozen"] and _FROZEN_HOOK
                               else {})}
    module = vars(dataclasses)
    saved = {name: module.get(name, _UNSET) for name in hooks}
    module.update(hooks)
    try:
        return dataclasses.dataclass(cls, **kwargs)
    finally:
        for name, value in saved.items():
            if value is _UNSET:
                del module[name]
            else:
                module[name] = value


def record(cls: type | None = None, /, *, init: bool = True, repr: bool = True, eq: bool = True, order: bool = False,
           unsafe_hash: bool = False, frozen: bool = False, match_args: bool = True, kw_only: bool = False,
           slots: bool = False) -> Any:
    """``dataclasses.dataclass``, used the same way (``@dataclass``, ``@dataclass(frozen=True)``)."""
    def wrap(cls: type) -> type:
        if order or unsafe_hash or slots:  # none of llmcalc's records: left to dataclasses entirely
            return dataclasses.dataclass(cls, init=init, repr=repr, eq=eq, order=order, unsafe_hash=unsafe_hash,
                                         frozen=frozen, match_args=match_args, kw_only=kw_only, slots=slots)
        own = set(cls.__dict__)
        own_hash = cls.__dict__.get("__hash__", dataclasses.MISSING)
        # dataclasses' test: a class body with __eq__ and no __hash__ has __hash__ None, which is not explicit
        explicit_hash = not (own_hash is dataclasses.MISSING or (own_hash is None and "__eq__" in own))
        made = _dataclass(cls, init=init, repr=False, eq=False, frozen=frozen, match_args=match_args, kw_only=kw_only)
        _methods(made, own, frozen=frozen, repr=repr, eq=eq, explicit_hash=explicit_hash)
        return made

    return wrap if cls is None else wrap(cls)


_Plan = tuple[dict[str, Any], frozenset[str], tuple[tuple[str, Any], ...]]
_PLANS: dict[type, _Plan | None] = {}


def _plan(cls: Any) -> _Plan | None:
    """(each stored field's name -> default, in field order; the required names; each InitVar's name and default) of
    a record whose __init__ is the generated one and only stores its arguments; None for any other class."""
    if cls not in _PLANS:
        fields = list(getattr(cls, "__dataclass_fields__", {}).values())
        init = vars(cls).get("__init__")
        generated = getattr(getattr(init, "__code__", None), "co_filename", None) == "<string>"
        plain = generated and cls.__new__ is object.__new__ and all(
            f.init and f.default_factory is dataclasses.MISSING for f in fields)
        stored = [f for f in fields if f._field_type is dataclasses._FIELD]  # type: ignore[attr-defined]
        initvars = [f for f in fields if f._field_type is dataclasses._FIELD_INITVAR]  # type: ignore[attr-defined]
        _PLANS[cls] = (({f.name: f.default for f in stored},
                        frozenset(f.name for f in stored + initvars if f.default is dataclasses.MISSING),
                        tuple((f.name, f.default) for f in initvars)) if plain else None)
    return _PLANS[cls]


def construct(cls: Any, values: dict[str, Any], **initvars: Any) -> Any:
    """``cls(**values, **initvars)``, the same instance made without running the generated ``__init__``'s one call per
    field (the spec's two records have ~95): each field's value as given, else its default, stored in field order, then
    ``__post_init__`` with the InitVars (given, else their defaults), as that __init__ does. A class that is not such a
    record (its own __init__ or __new__, a default factory, an init=False field), and arguments that are not exactly
    its fields and InitVars with every required one given, go to ``cls(...)`` itself (which raises as it does)."""
    plan = _plan(cls)
    if plan is None:
        return cls(**values, **initvars)
    stored, required, initvar_fields = plan
    if not (values.keys() <= stored.keys() and initvars.keys() <= {name for name, _ in initvar_fields}
            and required - values.keys() <= initvars.keys()):  # (the required ones not in values: a few at most)
        return cls(**values, **initvars)
    made = object.__new__(cls)
    state = made.__dict__
    state.update(stored)  # every field, in field order (a required one's MISSING is given just below)
    state.update(values)
    if hasattr(cls, "__post_init__"):
        made.__post_init__(*(initvars.get(name, default) for name, default in initvar_fields))
    return made



def replaced(obj: Any, changes: dict[str, Any]) -> Any:
    """``dataclasses.replace(obj, **changes)``, made without running the generated ``__init__`` again where the record
    is nothing but its fields' values (construct's kind of record, without InitVars or ``__post_init__``): its values
    copied in field order with `changes` over them. Any other class, or a name that is not one of its fields, goes to
    ``dataclasses.replace`` (which raises as it does)."""
    cls = type(obj)
    plan = _plan(cls)
    if plan is None or plan[2] or hasattr(cls, "__post_init__") or not changes.keys() <= plan[0].keys():
        return dataclasses.replace(obj, **changes)
    made = object.__new__(cls)
    state = made.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return made

if TYPE_CHECKING:
    from dataclasses import dataclass
else:
    dataclass = record

__all__ = ["construct", "dataclass", "record", "replaced"]
