"""Args as JSON values: encoding (with field-naming errors), rebuilding as the registered
type, and the kind name derived from an args class.

Pure: nothing here does I/O, and nothing here knows the row model.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from awa_cli.errors import ValidationError

_ACRONYM_BOUNDARY = re.compile(r"([A-Z]+)([A-Z][a-z])")
_WORD_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])")


_KINDS: dict[type, str] = {}


def kind_for(args_type: type) -> str:
    """Derive a kind from an args class name: ``SMTPEmail`` → ``smtp_email``."""
    kind = _KINDS.get(args_type)
    if kind is None:
        name = args_type.__name__
        kind = _WORD_BOUNDARY.sub(r"\1_\2", _ACRONYM_BOUNDARY.sub(r"\1_\2", name)).lower()
        if len(_KINDS) < 4096:  # classes made on the fly must not grow it without bound
            _KINDS[args_type] = kind
    return kind


def args_to_dict(args: Any, field_name: str = "args") -> dict[str, Any]:
    """Turn a dataclass, pydantic model or mapping into a JSON-ready dict."""
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        value: Any = dataclasses.asdict(args)
    elif hasattr(args, "model_dump") and not isinstance(args, type):
        value = args.model_dump(mode="json")
    elif isinstance(args, Mapping):
        value = dict(args)
    else:
        raise ValidationError(
            field_name, f"expected a dataclass, pydantic model or dict, got {type(args).__name__}"
        )
    result: dict[str, Any] = json.loads(to_json(value, field_name))
    return result


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def args_json_of(args: Any, field_name: str = "args") -> str:
    """Args as compact JSON text; the same text ``to_json(args_to_dict(args))`` gives, faster
    (a dataclass's fields are taken shallowly; nested values go through the JSON default)."""
    kind = type(args)
    names = _FIELD_NAMES.get(kind)
    if names is None and dataclasses.is_dataclass(args) and not isinstance(args, type):
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(args))
    if names is not None:
        value: Any = {name: getattr(args, name) for name in names}
    elif isinstance(args, dict):
        value = args
    else:
        value = args_to_dict(args, field_name)
    return to_json(value, field_name)


# json.dumps writes NUL as the escape \u0000; an escaped backslash followed by "u0000" (a
# literal backslash in the data) is not one, so count the backslashes before it.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def to_json(value: Any, field_name: str) -> str:
    """Serialise to compact JSON, naming the field when the value does not serialise."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValidationError(field_name, f"not JSON-serialisable: {exc}") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ValidationError(field_name, "contains a NUL character")
    return text


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_json_default)


def rebuild_args(args_type: type | None, data: Mapping[str, Any]) -> Any:
    """Rebuild args as the registered type; raises on a mismatch."""
    if args_type is None or args_type is dict:
        return dict(data)
    if hasattr(args_type, "model_validate"):
        return args_type.model_validate(data)
    return args_type(**data)
