"""Prometheus metrics of the storage layer (registered in the default registry)."""

from prometheus_client import Counter, Histogram

APPENDED_ENTRIES = Counter("nereus_storage_appended_entries", "Entries committed to streams")
APPENDED_RECORDS = Counter("nereus_storage_appended_records", "Records committed to streams")
APPENDED_BYTES = Counter("nereus_storage_appended_bytes", "Entry bytes committed to streams")
WAL_OBJECTS = Counter("nereus_storage_wal_objects", "WAL objects written")
WAL_OBJECT_BYTES = Counter("nereus_storage_wal_object_bytes", "Bytes of WAL objects written")
FENCED_SLICES = Counter("nereus_storage_fenced_slices", "Slices rejected because their session was fenced")
FLUSH_SECONDS = Histogram(
    "nereus_storage_flush_seconds", "Time from flush start to the last slice committed",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
FETCHED_BYTES = Counter("nereus_storage_fetched_bytes", "Entry bytes served to readers", ["source"])
GC_DELETED_OBJECTS = Counter("nereus_storage_gc_deleted_objects", "Objects deleted by the garbage collector")
