"""One resolver: a run config (a `ConfigDict`, as users write them) → the job's typed
settings, once, at the command's edge (levanter's typed configs; Flax lm1b's one config).

`resolve(PretrainSettings, config)` walks the settings record's fields: a field's name is
its config key; a plain field is read from the config at its level, checked against its
type (an integer where an integer is meant) and against the range or choices declared
beside it (`bert_jax.setting_fields`); a `flat` record reads its keys at the same level
(the shared training keys: ``config.learning_rate``), a nested record the block of its name
(``config.data``), a `BertConfig` its ``model`` block. A key the config lacks, a value of
the wrong type or out of range, and a key no field reads are each refused in one line
naming ``config.<key>``. The records' own ``__post_init__`` checks what only a pair of
values can break (the masking mix, a phase longer than the position table).

`to_config` is the other way: a record's defaults as a `ConfigDict` (`configs/defaults.py`
builds its blocks from these, so that a default is written once).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from typing import Any

import ml_collections

from bert_jax.model.config import BertConfig


class ConfigError(ValueError):
    """A config key missing, mistyped, out of range or unknown (one line naming it)."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def resolve(
    cls: type,
    node: ml_collections.ConfigDict,
    where: str = "config",
    partial: bool = False,
    fill: bool = False,
    **given: Any,
) -> Any:
    """The `cls` record of `node` (every key of its fields read and checked), with `given`
    fields set as passed; `ConfigError` names the first key that is wrong or unknown
    (`partial`: keys no field reads are left to another record; `fill`: a key the block
    leaves out takes its field's default, as in an ablation table's small blocks)."""
    read: set[str] = set()
    record = _record(cls, node, where, read, given, fill)
    unknown = [] if partial else sorted(k for k in node.keys() if k not in read)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]} is not a setting of this job ({_known(cls, unknown[0])})")
    return record


def _record(
    cls: type, node: Any, where: str, read: set[str], given: dict[str, Any], fill: bool = False
) -> Any:
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
            read.add(f.name)
            continue
        kind = _hints(cls)[f.name]
        if f.metadata.get("flat"):
            optional, kind = _optional(kind)
            if optional and not any(g.name in node for g in dataclasses.fields(kind)):
                values[f.name] = None  # an optional group none of whose keys is set
                continue
            # An optional group (QA's windows) takes the defaults of the keys it leaves out.
            values[f.name] = _record(kind, node, where, read, {}, fill or optional)
            continue
        key = f"{where}.{f.name}"
        if f.name not in node:
            if fill and (
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            ):
                continue
            raise ConfigError(f"{key} is missing (see configs/defaults.py)")
        read.add(f.name)
        values[f.name] = _value(kind, node[f.name], key)
        _check(f, values[f.name], key)
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:  # a record's own check of its values together
        raise ConfigError(str(e)) from None


def read(kind: Any, raw: Any, key: str) -> Any:
    """One value (a `BertConfig` from its dict, say) read and checked as a field's."""
    return _value(kind, raw, key)


def _value(kind: Any, raw: Any, key: str) -> Any:
    """`raw` as a `kind`, or `ConfigError` naming `key`."""
    if kind is BertConfig:  # its own reader: released configs' keys, the architecture's checks
        for f in dataclasses.fields(BertConfig):
            if f.name in raw:
                _check(f, raw[f.name], f"{key}.{f.name}")
        return BertConfig.from_dict(raw.to_dict() if isinstance(raw, ml_collections.ConfigDict) else raw)
    if dataclasses.is_dataclass(kind):
        if not isinstance(raw, ml_collections.ConfigDict):
            raise ConfigError(f"{key} must be a block of settings, not {raw!r}")
        return resolve(kind, raw, key)
    optional, inner = _optional(kind)
    if optional:
        return None if raw is None else _value(inner, raw, key)
    origin = typing.get_origin(kind)
    if origin is tuple:
        return _tuple(kind, raw, key)
    if origin is dict or kind is Any:
        return raw.to_dict() if isinstance(raw, ml_collections.ConfigDict) else raw
    ok = {
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
    }[kind]
    if not ok(raw):
        raise ConfigError(f"{key}={raw!r}: must be {_NAMES[kind]}")
    return kind(raw)


_NAMES = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}


def _tuple(kind: Any, raw: Any, key: str) -> tuple:
    if isinstance(raw, str):
        raise ConfigError(f"{key}={raw!r}: must be a tuple")
    if not isinstance(raw, list | tuple):
        raw = (raw,)  # one value for a list of them
    args = typing.get_args(kind)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_value(args[0], v, f"{key}[{i}]") for i, v in enumerate(raw))
    if len(args) != len(raw):
        raise ConfigError(f"{key}={tuple(raw)!r}: must hold {len(args)} values")
    return tuple(_value(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, raw, strict=True)))


def _optional(kind: Any) -> tuple[bool, Any]:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return True, args[0]
    return False, kind


def _check(f: dataclasses.Field, value: Any, key: str) -> None:
    rule, choices = f.metadata.get("rule"), f.metadata.get("choices")
    if rule is not None and value is not None:
        test, allowed = rule
        values = value if isinstance(value, tuple) else (value,)
        if not all(test(v) for v in values):
            raise ConfigError(f"{key}={value!r}: must be {allowed}")
    if choices is not None and value not in choices:
        raise ConfigError(f"{key}={value!r}: must be one of {', '.join(choices)}")


def _known(cls: type, key: str) -> str:
    """The key most like ``key`` ("did you mean ...?"), else the first known keys."""
    names = sorted(n for n in _leaf_names(cls) if n != "config")  # `config`: the record's copy
    close = difflib.get_close_matches(key, names, n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"known: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''}"


def _leaf_names(cls: type) -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("flat"):
            out += _leaf_names(_optional(_hints(cls)[f.name])[1])
        else:
            out.append(f.name)
    return out


def to_config(record: Any) -> ml_collections.ConfigDict:
    """A record's values as the `ConfigDict` a config file starts from (flat records at
    their parent's level, nested ones as blocks; a `BertConfig` as its dict)."""
    c = ml_collections.ConfigDict()
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        optional, kind = _optional(_hints(type(record))[f.name])
        if f.metadata.get("flat"):
            if value is not None:
                c.update(to_config(value))
        elif isinstance(value, BertConfig):
            c[f.name] = ml_collections.ConfigDict(dataclasses.asdict(value))
        elif dataclasses.is_dataclass(value):
            c[f.name] = to_config(value)
        elif value is None and optional:
            # None of a typed key (``bool | None``): the command line can still set it
            # (`--config.data.do_lower_case=false`), as the field's type.
            c[f.name] = ml_collections.FieldReference(None, field_type=kind)
        else:
            c[f.name] = value
    return c


def updated(record: Any, changes: dict[str, Any]) -> Any:
    """`record` with config keys set (``{"learning_rate": 3e-5, "data.nsp": False}``), each
    checked as the resolver checks it, and the record's ``config`` (the config as written,
    kept for the records) changed alike: how a sweep or an ablation cell derives a run
    from another's settings."""
    out = record
    for dotted, value in changes.items():
        out = _set(out, dotted.split("."), value, dotted)
    if changes and any(f.name == "config" for f in dataclasses.fields(out)):
        config = ml_collections.ConfigDict(out.config)
        for dotted, value in changes.items():
            *parents, leaf = dotted.split(".")
            node = config
            for p in parents:
                node = node[p]
            node[leaf] = value
        out = dataclasses.replace(out, config=config.to_dict())
    return out


def _set(record: Any, path: list[str], value: Any, dotted: str) -> Any:
    name = path[0]
    for f in dataclasses.fields(record):
        kind = _hints(type(record))[f.name]
        if f.name == name and len(path) == 1:
            if f.metadata.get("flat"):
                break
            new = value if isinstance(value, BertConfig) else _value(kind, value, f"config.{dotted}")
            _check(f, new, f"config.{dotted}")
            return dataclasses.replace(record, **{name: new})
        if f.name == name and dataclasses.is_dataclass(getattr(record, name)):
            return dataclasses.replace(record, **{name: _set(getattr(record, name), path[1:], value, dotted)})
        if f.metadata.get("flat") and getattr(record, f.name) is not None:
            if name in _leaf_names(type(getattr(record, f.name))):
                return dataclasses.replace(
                    record, **{f.name: _set(getattr(record, f.name), path, value, dotted)}
                )
    raise ConfigError(f"config.{dotted} is not a setting of this job")
