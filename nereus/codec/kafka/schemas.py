"""The ``kio`` schema classes by API key and version, and helpers to build their objects."""

from __future__ import annotations

import functools
import sys
from dataclasses import fields
from types import ModuleType
from typing import Any

from kio.index import load_request_schema, load_response_schema


class MalformedRequest(ValueError):
    """The frame cannot be decoded: the connection is closed."""


@functools.lru_cache(maxsize=None)
def request_schema(api_key: int, version: int):
    return load_request_schema(api_key, version)


@functools.lru_cache(maxsize=None)
def response_schema(api_key: int, version: int):
    return load_response_schema(api_key, version)


@functools.lru_cache(maxsize=None)
def _field_names(cls) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def module_of(cls) -> ModuleType:
    return sys.modules[cls.__module__]


def make(cls, **values: Any):
    """Build a schema object from values, dropping those this version does not have."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def nested(owner, name: str):
    """A nested schema class (e.g. ``MetadataResponseTopic``) of the same version as ``owner``."""
    return getattr(module_of(owner if isinstance(owner, type) else type(owner)), name)


def has(obj_or_cls, name: str) -> bool:
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    return name in _field_names(cls)


__all__ = ["MalformedRequest", "has", "make", "module_of", "nested", "request_schema", "response_schema"]
