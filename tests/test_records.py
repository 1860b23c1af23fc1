"""llmcalc.records.dataclass against dataclasses.dataclass: the same class behaviour, method for method."""

import ast
import dataclasses
import inspect
import math
import re
import sys
from dataclasses import InitVar, field
from pathlib import Path

import pytest

from llmcalc.records import record

PACKAGE = Path(__file__).resolve().parent.parent / "llmcalc"


def _classes(decorate):
    """The same class bodies decorated by `decorate` (dataclasses.dataclass or records.record)."""

    @decorate(frozen=True)
    class Point:
        x: int
        y: float = 0.0
        label: str = field(default="", compare=False)
        secret: str = field(default="", repr=False)
        tag: str = field(default="", hash=False)
        extra: int = field(default=0, compare=False, hash=True)
        items: tuple = field(default_factory=tuple)

    @decorate(frozen=True)
    class Point3(Point):  # a subclass: its own fields, its own methods
        z: int = 0

    @decorate
    class Box:  # not frozen: equal by fields, unhashable
        things: list = field(default_factory=list)
        name: str = "box"

    @decorate(frozen=True)
    class OwnEq:  # its own __eq__ is kept; dataclasses still adds the field hash
        a: int

        def __eq__(self, other):
            return isinstance(other, OwnEq)

    @decorate(frozen=True)
    class OwnHashRepr:  # its own __hash__ and __repr__ are kept
        a: int

        def __hash__(self):
            return 7

        def __repr__(self):
            return "own"

    @decorate(frozen=True, kw_only=True)
    class KwOnly:
        a: int
        b: int = 2
        seen: list = field(default_factory=list, compare=False)
        scale: InitVar[int] = 1

        def __post_init__(self, scale):
            self.seen.append(scale)

    @decorate(frozen=True)
    class One:
        a: float

    @decorate(frozen=True)
    class Empty:
        pass

    @decorate(eq=False)
    class NoEq:
        a: int = 0

    @decorate(repr=False, frozen=True)
    class NoRepr:
        a: int = 0

    return Point, Point3, Box, OwnEq, OwnHashRepr, KwOnly, One, Empty, NoEq, NoRepr


def _instances(classes):
    Point, Point3, Box, OwnEq, OwnHashRepr, KwOnly, One, Empty, NoEq, NoRepr = classes
    nan = math.nan
    return [
        Point(1), Point(1, 2.0), Point(1, 2.0, "l"), Point(1, 2.0, secret="s"), Point(1, tag="t"),
        Point(1, extra=3), Point(1, items=(1, 2)), Point(1, nan), Point(1, math.nan), Point3(1), Point3(1, z=2),
        Box(), Box([1]), Box(name="b"), OwnEq(1), OwnEq(2), OwnHashRepr(1), KwOnly(a=1), KwOnly(a=1, b=3, scale=5),
        One(1.0), One(nan), Empty(), NoEq(), NoEq(1), NoRepr(), NoRepr(2),
    ], nan


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # the same exception type and message
        return (type(exc).__name__, str(exc))


def _behaviour(classes):
    instances, _ = _instances(classes)
    out = []
    for i, a in enumerate(instances):
        shown = re.sub(r" at 0x[0-9a-f]+", "", repr(a)).replace(type(a).__qualname__, type(a).__name__)
        out.append(("repr", shown))
        out.append(("hash", _outcome(lambda a=a: hash(a) if type(a).__hash__ is not object.__hash__ else "identity")))
        for j, b in enumerate(instances):
            out.append(("eq", i, j, a == b, a != b))
    box = classes[2]()
    box.things.append(box)  # a record inside itself: the repr's recursion guard
    out.append(("recursive", repr(box).replace(type(box).__qualname__, "Box")))
    out.append(("kw", classes[5](a=1, scale=4).seen, _outcome(lambda: classes[5](1))))
    out.append(("frozen", _outcome(lambda: setattr(instances[0], "x", 2))))
    out.append(("frozen", _outcome(lambda: setattr(instances[0], "other", 2)),
                _outcome(lambda: delattr(instances[0], "x"))))
    plain = type("Plain", (classes[0],), {})(1)  # a subclass that is no dataclass: its own attributes may be set
    out.append(("subclass", _outcome(lambda: setattr(plain, "other", 2)), _outcome(lambda: delattr(plain, "other")),
                _outcome(lambda: setattr(plain, "x", 2)), _outcome(lambda: delattr(plain, "y")), vars(plain)))
    out.append(("methods", [(c.__setattr__.__name__, c.__setattr__.__qualname__.split(".<locals>.")[-1],
                             c.__delattr__.__qualname__.split(".<locals>.")[-1]) for c in classes]))
    out.append(("fields", [[(f.name, f.compare, f.hash, f.repr) for f in dataclasses.fields(c)] for c in classes]))
    out.append(("replace", repr(dataclasses.replace(instances[1], y=5.0)).replace("_classes.<locals>.", "")))
    out.append(("asdict", dataclasses.asdict(instances[6])))
    return out


def test_records_behave_as_dataclasses():
    assert _behaviour(_classes(record)) == _behaviour(_classes(dataclasses.dataclass))


def test_the_comparison_sees_a_difference():
    """The check above fails for a record that compares one field too few (a repr or hash left out likewise)."""

    def careless(cls=None, /, **kw):
        def wrap(cls):
            made = record(cls, **kw)
            if "y" in {f.name for f in dataclasses.fields(made)}:
                made.__eq__ = lambda self, other: self.x == other.x if type(other) is type(self) else NotImplemented
            return made

        return wrap if cls is None else wrap(cls)

    assert _behaviour(_classes(careless)) != _behaviour(_classes(dataclasses.dataclass))


def test_nan_fields_compare_as_the_generated_tuples_do():
    """Tuples compare members by identity first: one NaN object equals itself in a record, two NaNs do not."""
    One = _classes(record)[6]
    nan = math.nan
    assert One(nan) == One(nan) and One(float("nan")) != One(float("nan"))


def test_llmcalc_records_come_from_llmcalc_records():
    """Every dataclass in llmcalc is made by llmcalc.records.dataclass (start-up cost, issue 24)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "dataclasses" and path.name != "records.py":
                assert "dataclass" not in {a.name for a in node.names}, f"{path}: from dataclasses import dataclass"
            if isinstance(node, ast.Attribute) and node.attr == "dataclass":
                assert path.name == "records.py", f"{path}: dataclasses.dataclass"


@pytest.mark.parametrize("kwargs", [dict(order=True), dict(unsafe_hash=True), dict(slots=True)])
def test_what_records_do_not_handle_goes_to_dataclasses(kwargs):
    def body():
        class A:
            a: int = 0

        return A

    made, reference = record(body(), **kwargs), dataclasses.dataclass(body(), **kwargs)
    assert made.__dataclass_params__.__repr__() == reference.__dataclass_params__.__repr__()
    assert (hasattr(made, "__slots__"), made.__hash__ is None) == (hasattr(reference, "__slots__"),
                                                                   reference.__hash__ is None)


def _init_of(cls):
    init = cls.__init__
    code = init.__code__
    return (code.co_code, code.co_consts, code.co_names, code.co_varnames, code.co_freevars, code.co_filename,
            code.co_qualname, init.__qualname__, init.__defaults__, init.__kwdefaults__, repr(init.__annotations__),
            str(inspect.signature(init)))


def test_init_is_dataclasses_own_from_the_cache_or_not(tmp_path, monkeypatch):
    """The generated __init__ is dataclasses' to the byte: compiled (cold cache) and read back (warm), its defaults,
    annotations and signature too; a corrupt cache file is compiled over and rewritten."""
    from llmcalc import records

    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    reference = [_init_of(c) for c in _classes(dataclasses.dataclass)]
    assert [_init_of(c) for c in _classes(record)] == reference  # cold: compiled and written
    files = sorted((tmp_path / "records").iterdir())
    assert files
    compiles = []
    monkeypatch.setattr(records, "compile", lambda *a, **k: compiles.append(a) or compile(*a, **k), raising=False)
    assert [_init_of(c) for c in _classes(record)] == reference and not compiles  # warm: read back, none compiled
    for path in files:
        path.write_bytes(b"not marshal")
    assert [_init_of(c) for c in _classes(record)] == reference and compiles
    assert all(path.read_bytes() != b"not marshal" for path in files)
    assert _behaviour(_classes(record)) == _behaviour(_classes(dataclasses.dataclass))


def test_an_unwritable_or_switched_off_cache_is_only_not_written(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(blocker / "below"))  # a folder that cannot be made
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert [_init_of(c) for c in _classes(record)] == [_init_of(c) for c in _classes(dataclasses.dataclass)]
    monkeypatch.setenv("LLMCALC_CACHE_DIR", str(tmp_path / "off"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE: as for bytecode
    _classes(record)
    assert not (tmp_path / "off").exists()


def test_construct_makes_what_the_class_makes():
    """records.construct(cls, values, **initvars) is cls(**values, **initvars): the same fields in the same order, the
    same __post_init__, and the same TypeError for what is not a field or leaves a required one out."""
    from llmcalc.records import construct

    Point, Point3, Box, OwnEq, OwnHashRepr, KwOnly, One, Empty, NoEq, NoRepr = _classes(record)

    class Custom(NoEq):
        def __init__(self, a=5):
            self.a = a * 2

    cases = [(Point, {"x": 1}, {}), (Point, {"x": 1, "tag": "t", "y": 3.0}, {}), (Point3, {"z": 2, "x": 1}, {}),
             (KwOnly, {"a": 1}, {}), (KwOnly, {"a": 1, "b": 3}, {"scale": 5}), (KwOnly, {"b": 3}, {"scale": 5}),
             (Box, {"name": "b"}, {}), (One, {"a": 1.0}, {}), (Empty, {}, {}), (NoEq, {}, {}), (Custom, {"a": 1}, {}),
             (Point, {}, {}), (Point, {"x": 1, "nope": 2}, {}), (KwOnly, {"a": 1}, {"nope": 1}), (One, {}, {"a": 1})]
    for cls, values, initvars in cases:
        made = _outcome(lambda cls=cls, values=values, initvars=initvars: construct(cls, dict(values), **initvars))
        reference = _outcome(lambda cls=cls, values=values, initvars=initvars: cls(**values, **initvars))
        assert made[0] == reference[0], (cls, values)
        if made[0] == "ok":
            assert type(made[1]) is cls and list(vars(made[1]).items()) == list(vars(reference[1]).items())
            assert repr(made[1]) == repr(reference[1]) and made[1] == reference[1] or cls is NoEq or cls is Custom
        else:
            assert made[1].replace("construct", "") == reference[1].replace("construct", ""), (made, reference)
    assert construct(KwOnly, {"a": 1}, scale=9).seen == [9]  # __post_init__ ran, with the InitVar
    assert construct(Box, {}).things == [] and construct(Box, {}).things is not construct(Box, {}).things


def test_replaced_makes_what_dataclasses_replace_makes():
    """records.replaced(obj, changes) is dataclasses.replace(obj, **changes): the same fields in the same order, the
    original untouched; a record with InitVars or __post_init__, a default factory, its own __init__, and a name that
    is not a field go to dataclasses.replace (the same instance or the same TypeError)."""
    from llmcalc.records import replaced

    Point, Point3, Box, OwnEq, OwnHashRepr, KwOnly, One, Empty, NoEq, NoRepr = _classes(record)
    cases = [(Point(1), {"y": 2.0}), (Point(1, tag="t"), {}), (Point3(1, z=3), {"x": 4}), (One(1.0), {"a": 2.0}),
             (Box("b"), {"name": "c"}), (KwOnly(a=1, scale=5), {"b": 2, "scale": 7}), (Point(1), {"nope": 2}),
             (Empty(), {})]
    for obj, changes in cases:
        before = list(vars(obj).items())
        made = _outcome(lambda obj=obj, changes=changes: replaced(obj, dict(changes)))
        reference = _outcome(lambda obj=obj, changes=changes: dataclasses.replace(obj, **changes))
        assert made[0] == reference[0], (obj, changes)
        if made[0] == "ok":
            assert type(made[1]) is type(obj) and list(vars(made[1]).items()) == list(vars(reference[1]).items())
            assert made[1] == reference[1] and repr(made[1]) == repr(reference[1])
        else:
            assert made[1] == reference[1], (made, reference)
        assert list(vars(obj).items()) == before
