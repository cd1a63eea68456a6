"""Schema columns of delivered tables, and the dead-letter rows of records that have none.

With ``deliver --schema-columns`` the rows of an AVRO or JSON topic carry the fields of
the topic's latest schema as columns after the fixed ones (``schema_columns``: the same
mapping Spark reads use, as Arrow types). A later schema version that adds a field adds a
column: targets evolve the table's schema (Delta schema merge, Iceberg ``union_by_name``,
a Hudi commit with the wider schema), and earlier rows read it as null; nothing is
rewritten. A record whose value is not a record of the topic's schema becomes a row of
the dead-letter table instead, with the fixed columns, the reason and the schema version.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ..meta import MetadataStore
from .table_format import RECORD_SCHEMA

#: The fixed columns of every delivered table: the topic, then the record columns of the built-in tables.
ARROW_SCHEMA = pa.schema([pa.field("topic", pa.string(), nullable=False), *RECORD_SCHEMA])
DEAD_LETTER_SCHEMA = pa.schema(list(ARROW_SCHEMA) + [pa.field("reason", pa.string()),
                                                     pa.field("schema_version", pa.int64())])


@dataclass
class DecodedValues:
    """The topic's schema columns now: their Arrow schema and the decoder of values into them."""

    schema: pa.Schema  # ARROW_SCHEMA and the schema columns
    decode: object  # schema_columns.ValueDecoder: (value, version) -> (columns, reason | None)


async def plan_columns(meta: MetadataStore, topic: str) -> DecodedValues | None:
    """The schema columns of ``topic``'s latest AVRO/JSON record schema; None without one."""
    from . import schema_columns

    values = await schema_columns.latest_value_columns(meta, topic)
    if values is None:
        return None
    columns = schema_columns.arrow_columns(values)
    return DecodedValues(pa.schema(list(ARROW_SCHEMA) + list(columns.fields)), columns.decode.decode)
