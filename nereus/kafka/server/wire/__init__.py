"""Connections: framing, in-order answers, the dispatch of each API key to its room, request metrics."""
