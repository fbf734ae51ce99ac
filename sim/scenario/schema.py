"""Build typed, frozen config dataclasses from plain YAML/dict data, with errors that name the field.

Scenarios and profiles are YAML files that map onto the dataclasses of :mod:`sim.scenario.config`. This
module turns ``{"thermal": {"r_c_per_w": -1}}`` into ``ThermalConfig(...)`` or into a
:class:`ConfigError` such as ``device jetson.thermal.r_c_per_w: must be > 0, got -1``. Each
dataclass validates its own values in ``__post_init__`` by raising ``ValueError`` naming the field
(``field: message``); :func:`build` prefixes the path to that field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A scenario or profile that cannot be used; the message names the bad field."""


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file, turning I/O and syntax errors into :class:`ConfigError`."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None


def require(cond: bool, field: str, message: str) -> None:
    """Raise ``ValueError("field: message")`` unless ``cond`` — the idiom of every ``__post_init__``."""
    if not cond:
        raise ValueError(f"{field}: {message}")


def positive(value: float, field: str) -> None:
    require(value > 0, field, f"must be > 0, got {value!r}")


def non_negative(value: float, field: str) -> None:
    require(value >= 0, field, f"must be >= 0, got {value!r}")


def fraction(value: float, field: str) -> None:
    require(0 <= value <= 1, field, f"must be within [0, 1], got {value!r}")


def build(cls: type[T], data: Any, path: str) -> T:
    """Construct dataclass ``cls`` from mapping ``data``; ``path`` names it in error messages."""
    return typing.cast(T, _convert(cls, data, path))


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        shaped = [a for a in args if dataclasses.is_dataclass(a)]
        if isinstance(value, Mapping) and len(shaped) == 1:
            return _convert(shaped[0], value, path)
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, path)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: no form fits ({'; '.join(errors)})")
    if origin is typing.Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(f"{path}: must be one of {', '.join(map(repr, choices))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _build_dataclass(tp, value, path)
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path}: expected a list, got {type(value).__name__}")
        args = get_args(tp)
        item_tp = args[0] if args else Any
        items = [_convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple or tp is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
        args = get_args(tp)
        val_tp = args[1] if len(args) == 2 else Any
        return {str(k): _convert(val_tp, v, _join(path, str(k))) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return int(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    if isinstance(tp, type) and issubclass(tp, str):  # str enums
        try:
            return tp(value)
        except ValueError:
            names = ", ".join(repr(getattr(m, "value", m)) for m in list(tp))  # type: ignore[call-overload]
            raise ConfigError(f"{path}: must be one of {names}, got {value!r}") from None
    return value


def _build_dataclass(cls: type, value: Any, path: str) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ConfigError(
            f"{_join(path, str(unknown[0]))}: unknown field (known: {', '.join(sorted(fields))})"
        )
    kwargs = {}
    for name, f in fields.items():
        if name in value:
            kwargs[name] = _convert(hints[name], value[name], _join(path, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{_join(path, name)}: required field is missing")
    try:
        return cls(**kwargs)
    except ValueError as e:
        msg = str(e)
        field, sep, rest = msg.partition(": ")
        if sep and " " not in field:
            raise ConfigError(f"{_join(path, field)}: {rest}") from None
        raise ConfigError(f"{path}: {msg}") from None
