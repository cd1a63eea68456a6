"""A Pulsar protocol client inside the broker: what replicators use to reach other clusters."""

from .connection import ClientConnection, ClientError, ConnectionClosed, parse_service_url
from .producer import ClusterClient, RemoteProducer

__all__ = ["ClientConnection", "ClientError", "ClusterClient", "ConnectionClosed", "RemoteProducer",
           "parse_service_url"]
