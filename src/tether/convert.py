"""Typed job args and results: a handler parameter (or return value)
annotated with a dataclass, ``datetime``, ``date``, ``UUID``, ``Decimal``, an
``Enum`` or a Pydantic model (or a list, tuple, set, dict or union of them) is
checked and turned into JSON at enqueue (``dump``) and rebuilt from that JSON
in the worker (``load``). Plain annotations (``int``, ``dict``, none) are
left alone: a handler without typed parameters runs exactly as before.

Pydantic is optional: it is never imported here. A class is a Pydantic model
when ``pydantic`` is already imported (the user's module did) and the class
derives from its ``BaseModel``.

Both directions name the field that does not fit (``order.items[2].sku``):
``dump`` raises ``Misfit`` for the caller to turn into an ``ArgumentsError``
(at enqueue) or a ``PayloadError`` (a result), ``load`` the same for an
``ArgsMisfit`` (stored args a changed class no longer takes)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import sys
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["Misfit", "dump", "is_typed", "load", "type_hints"]


class Misfit(Exception):
    """A value that does not fit its annotation, at ``path``."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


#: containers annotated bare (``tuple``, no item type): a tuple or set comes back as one
_BARE = (list, tuple, set, frozenset, dict)
_SCALARS: dict[type, str] = {datetime: "an ISO datetime", date: "an ISO date", uuid.UUID: "a UUID",
                             Decimal: "a decimal string"}


def _pydantic_model(tp: object) -> bool:
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _strip(tp: Any) -> Any:
    """``Annotated[X, ...]`` and ``NewType`` as the type they stand for."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = tp.__origin__
        elif hasattr(tp, "__supertype__"):
            tp = tp.__supertype__
        else:
            return tp


def is_typed(tp: Any) -> bool:
    """Whether values of ``tp`` need converting (somewhere in it is a type JSON cannot carry as is)."""
    tp = _strip(tp)
    if isinstance(tp, type) and (tp in _SCALARS or issubclass(tp, enum.Enum) or dataclasses.is_dataclass(tp)
                                 or _pydantic_model(tp)):
        return True
    return any(is_typed(a) for a in typing.get_args(tp) if a is not Ellipsis)


def type_hints(obj: Any) -> dict[str, Any]:
    """``obj``'s annotations, resolved (``from __future__ import annotations``
    included). One that cannot be resolved (a name only ``TYPE_CHECKING``
    imports, a class local to a function) is left out: its values pass as plain JSON."""
    try:
        return typing.get_type_hints(obj)
    except Exception:  # resolve what can be, one at a time
        pass
    raw = getattr(obj, "__annotations__", {})
    out = {}
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    namespace = dict(vars(module)) if module is not None else {}
    namespace.update(getattr(obj, "__globals__", {}))
    for name, ann in raw.items():
        try:
            out[name] = eval(ann, namespace) if isinstance(ann, str) else ann
        except Exception:
            continue
    return out


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """A dataclass's init fields: (name, type, required)."""
    hints = type_hints(cls)
    return tuple((f.name, hints.get(f.name, Any), f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING)
                 for f in dataclasses.fields(cls) if f.init)


def _got(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def _union_members(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    return typing.get_args(tp) if origin is typing.Union or origin is types.UnionType else None


def dump(value: Any, tp: Any, path: str) -> Any:
    """``value``, which must be a ``tp``, as JSON-ready data."""
    tp = _strip(tp)
    if tp is Any or isinstance(tp, typing.TypeVar):
        return value
    members = _union_members(tp)
    if members is not None:
        if value is None and type(None) in members:
            return None
        return _first_fit(dump, value, [m for m in members if m is not type(None)], path)
    origin = typing.get_origin(tp) or (tp if tp in _BARE else None)
    if origin is not None:
        return _dump_generic(value, tp, origin, path)
    if not isinstance(tp, type):  # Literal, a TypedDict's parts, ...: passed as given
        return value
    if (tp is date and isinstance(value, datetime)) or not _is_instance(value, tp):
        raise Misfit(path, f"expected {_name(tp)}, got {_got(value)}")
    if tp in _SCALARS:
        return value.isoformat() if isinstance(value, date) else str(value)
    if issubclass(tp, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(tp):
        return {name: dump(getattr(value, name), ftp, f"{path}.{name}") for name, ftp, _ in _fields(tp)}
    if _pydantic_model(tp):
        return value.model_dump(mode="json")
    return value


def _is_instance(value: Any, tp: type) -> bool:
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _first_fit(fn: Callable[[Any, Any, str], Any], value: Any, members: list[Any], path: str) -> Any:
    """A union's value through the first member it fits."""
    misfits = []
    for member in members:
        try:
            return fn(value, member, path)
        except Misfit as exc:
            misfits.append(exc)
    if len(misfits) == 1:
        raise misfits[0]
    raise Misfit(path, f"fits none of {' | '.join(map(_name, members))}, got {_got(value)}")


def _dump_generic(value: Any, tp: Any, origin: Any, path: str) -> Any:
    args = typing.get_args(tp)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        if not isinstance(value, Mapping):
            raise Misfit(path, f"expected a mapping, got {_got(value)}")
        ktp, vtp = args if len(args) == 2 else (Any, Any)
        out = {}
        for k, v in value.items():
            key = dump(k, ktp, f"{path} key {k!r}")
            if not isinstance(key, str):
                raise Misfit(f"{path} key {k!r}", "a key must become a string in JSON")
            out[key] = dump(v, vtp, f"{path}[{k!r}]")
        return out
    if origin in (list, tuple, set, frozenset) or (isinstance(origin, type) and origin.__module__ == "collections.abc"):
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple, set, frozenset)):
            raise Misfit(path, f"expected a {_name(origin)}, got {_got(value)}")
        return [dump(v, t, f"{path}[{i}]") for i, (v, t) in enumerate(_items(value, args, origin, path))]
    return value


def _items(value: Any, args: tuple[Any, ...], origin: Any, path: str) -> list[tuple[Any, Any]]:
    """A sequence's items with each one's type."""
    items = list(value)
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(items) != len(args):
            raise Misfit(path, f"expected {len(args)} items, got {len(items)}")
        return list(zip(items, args, strict=True))
    return [(v, args[0] if args else Any) for v in items]


def load(data: Any, tp: Any, path: str) -> Any:
    """JSON data that ``dump`` made of a ``tp``, as a ``tp`` again."""
    tp = _strip(tp)
    if tp is Any or isinstance(tp, typing.TypeVar):
        return data
    members = _union_members(tp)
    if members is not None:
        if data is None and type(None) in members:
            return None
        return _first_fit(load, data, [m for m in members if m is not type(None)], path)
    origin = typing.get_origin(tp) or (tp if tp in _BARE else None)
    if origin is not None:
        return _load_generic(data, tp, origin, path)
    if not isinstance(tp, type):
        return data
    try:
        if tp in _SCALARS:
            if not isinstance(data, str):
                raise Misfit(path, f"expected {_SCALARS[tp]} string, got {_got(data)}")
            if tp is date:
                return date.fromisoformat(data)
            return datetime.fromisoformat(data) if tp is datetime else tp(data)
        if issubclass(tp, enum.Enum):
            return tp(data)
        if dataclasses.is_dataclass(tp):
            return _load_dataclass(data, tp, path)
        if _pydantic_model(tp):
            return typing.cast(Any, tp).model_validate(data)
    except Misfit:
        raise
    except (ValueError, TypeError, InvalidOperation) as exc:
        raise Misfit(_pydantic_path(path, exc), f"not a {_name(tp)}: {_first_line(exc)}") from None
    if not _is_instance(data, tp):
        raise Misfit(path, f"expected {_name(tp)}, got {_got(data)}")
    return data


def _first_line(exc: BaseException) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):  # a Pydantic ValidationError: its first error's message
        first = errors()[0]
        return f"{first.get('msg')} (got {first.get('input')!r})"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _pydantic_path(path: str, exc: BaseException) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        loc = errors()[0].get("loc", ())
        return path + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    return path


def _load_dataclass(data: Any, cls: type, path: str) -> Any:
    if not isinstance(data, dict):
        raise Misfit(path, f"expected an object of {cls.__name__}'s fields, got {_got(data)}")
    fields = _fields(cls)
    known = {name for name, _, _ in fields}
    stray = sorted(set(data) - known)
    if stray:
        raise Misfit(f"{path}.{stray[0]}", f"{cls.__name__} has no field {stray[0]!r}")
    missing = [name for name, _, required in fields if required and name not in data]
    if missing:
        raise Misfit(f"{path}.{missing[0]}", f"{cls.__name__}'s required field {missing[0]!r} is missing")
    kwargs = {name: load(data[name], ftp, f"{path}.{name}") for name, ftp, _ in fields if name in data}
    return cls(**kwargs)


def _load_generic(data: Any, tp: Any, origin: Any, path: str) -> Any:
    args = typing.get_args(tp)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        if not isinstance(data, dict):
            raise Misfit(path, f"expected an object, got {_got(data)}")
        ktp, vtp = args if len(args) == 2 else (Any, Any)
        return {load(k, ktp, f"{path} key {k!r}"): load(v, vtp, f"{path}[{k!r}]") for k, v in data.items()}
    if origin in (list, tuple, set, frozenset) or (isinstance(origin, type) and origin.__module__ == "collections.abc"):
        if not isinstance(data, list):
            raise Misfit(path, f"expected a list, got {_got(data)}")
        items = [load(v, t, f"{path}[{i}]") for i, (v, t) in enumerate(_items(data, args, origin, path))]
        return origin(items) if origin in (tuple, set, frozenset) else items
    return data
