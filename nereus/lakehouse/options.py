"""The options of the ``nereus`` data source (case-insensitive), parsed and checked.

Shared by the batch reader (``spark.py``), the stream reader (``streaming.py``) and the
writers (``sink.py``); what each option means is told there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from .wal_access import DEFAULT_UPLOAD_WAIT, WalAccess

DEFAULT_RECORDS_PER_PARTITION = 100_000


def option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    return lowered.get(name.lower(), default)


def required(options: Mapping[str, str], name: str) -> str:
    value = option(options, name)
    if not value:
        raise ValueError(f"the nereus data source needs the {name!r} option")
    return value


def flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = option(options, name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"the {name!r} option must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def positive(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    """An optional integer option that must be >= 1."""
    value = option(options, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"the {name!r} option must be an integer >= 1, not {value!r}")
    return number


def check_offset_option(name: str, spec: str | None) -> None:
    """Raise ValueError unless ``spec`` is earliest, latest, an offset or a JSON object of them."""
    if spec is None or not spec.strip():
        return
    text = spec.strip()
    values = [text]
    if text.startswith("{"):
        try:
            per = json.loads(text)
        except json.JSONDecodeError:
            per = None
        if not isinstance(per, dict) or not all(_is_partition(k) for k in per):
            raise ValueError(f"bad {name} {spec!r}: a JSON object maps partitions (\"-1\", \"0\", ...) to offsets")
        values = list(per.values())
    for value in values:
        if isinstance(value, str) and value.strip().lower() in ("earliest", "latest"):
            continue
        try:
            ok = not isinstance(value, bool) and int(value) >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"bad {name} {spec!r}: use earliest, latest, an offset >= 0, or JSON per partition")


def _is_partition(key: str) -> bool:
    try:
        return int(key) >= -1
    except ValueError:
        return False


def check_read_options(options: Mapping[str, str]) -> None:
    """Raise ValueError for a malformed read option, before anything is planned."""
    for name in ("startingOffset", "endingOffset"):
        check_offset_option(name, option(options, name))
    records_per_partition(options)
    starting_timestamp(options)
    positive(options, "maxRecordsPerTrigger", None)
    flag(options, "schemaColumns", True)
    wal_access(options)


def set_read_options(reader, options: Mapping[str, str], schema) -> None:
    """Check the read options and set those a batch and a stream reader share on ``reader``."""
    check_read_options(options)
    reader.metadata = required(options, "metadata")
    reader.objects = required(options, "objects")
    reader.topic = required(options, "topic")
    reader.starting = option(options, "startingOffset")
    reader.starting_timestamp = starting_timestamp(options)
    reader.chunk = records_per_partition(options)  # checked above: cannot raise here
    reader.wal_access = wal_access(options)
    reader.schema = schema


def wal_access(options: Mapping[str, str]) -> WalAccess:
    """How read tasks reach WAL replicas: ``walAuthParams`` (a token, as Pulsar's broker clients
    take it), ``walTlsCertFile``/``walTlsKeyFile``/``walTlsTrustCertsFile`` (for replicas served over
    TLS) and ``walUploadWaitSeconds``; ValueError when one is bad."""
    cert, key = option(options, "walTlsCertFile"), option(options, "walTlsKeyFile")
    trust = option(options, "walTlsTrustCertsFile")
    wait = option(options, "walUploadWaitSeconds")
    try:
        seconds = DEFAULT_UPLOAD_WAIT if wait is None else float(wait)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"the 'walUploadWaitSeconds' option must be a number of seconds >= 0, not {wait!r}")
    access = WalAccess(option(options, "walAuthParams"), trust, cert, key, seconds)
    access.check()
    return access


def starting_timestamp(options: Mapping[str, str]) -> int | None:
    """The ``startingTimestamp`` option (ms since the epoch), checked; None when unset."""
    value = option(options, "startingTimestamp")
    if value is None:
        return None
    try:
        millis = int(value)
    except ValueError:
        millis = -1
    if millis < 0:
        raise ValueError(f"the 'startingTimestamp' option must be ms since the epoch (>= 0), not {value!r}")
    if option(options, "startingOffset") is not None:
        raise ValueError("use startingOffset or startingTimestamp, not both")
    return millis


def offset_for(spec: str | None, partition: int, default: int, earliest: int, latest: int) -> int:
    """Offset given for ``partition`` by a startingOffset/endingOffset option (``default`` when unset)."""

    def one(value) -> int:
        if isinstance(value, str) and value.strip().lower() in ("earliest", "latest"):
            return earliest if value.strip().lower() == "earliest" else latest
        return int(value)

    if spec is None or not spec.strip():
        return default
    spec = spec.strip()
    if not spec.startswith("{"):
        try:
            return one(spec)
        except ValueError:
            raise ValueError(f"bad offset option {spec!r}: earliest, latest, an offset or JSON per partition") from None
    try:
        per = json.loads(spec)
    except json.JSONDecodeError:
        raise ValueError(f"bad offset option {spec!r}: expected a JSON object of partition -> offset") from None
    value = per.get(str(partition))
    return default if value is None else one(value)


def records_per_partition(options: Mapping[str, str]) -> int:
    return positive(options, "recordsPerPartition", DEFAULT_RECORDS_PER_PARTITION)


__all__ = ["DEFAULT_RECORDS_PER_PARTITION", "check_offset_option", "check_read_options", "flag", "offset_for", "option",
           "positive", "records_per_partition", "required", "starting_timestamp", "wal_access"]
