"""The embedded metadata engine: Oxia semantics on local LMDB shards, in-process."""

from .client import EmbeddedMetadataStore
from .engine import DEFAULT_NAMESPACE, Engine, Namespace
from .notify import NotificationsOverflow
from .sessions import Clock, ManualClock

__all__ = [
    "DEFAULT_NAMESPACE",
    "Clock",
    "EmbeddedMetadataStore",
    "Engine",
    "ManualClock",
    "Namespace",
    "NotificationsOverflow",
]
