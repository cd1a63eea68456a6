"""Sans-io protocol codecs: ``pulsar`` (the Pulsar binary protocol) and ``kafka`` (the Kafka
protocol and record batches v2). Bytes in, typed values out, and back; no I/O.

They sit below every layer that handles stored entries (topics, transactions, the
lakehouse), not inside the protocol servers, so those layers use them without an
import pointing up.
"""
