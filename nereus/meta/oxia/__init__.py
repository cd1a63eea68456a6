"""Oxia's client protocol for the metadata plane: a gRPC server over the embedded
engine (``nereus oxia``) and an asyncio ``MetadataStore`` client of any Oxia server."""

from .server import OxiaServer, start_oxia_server

__all__ = ["OxiaServer", "start_oxia_server"]
