"""The Kafka protocol listener over StreamStorage (see service.py)."""

from .service import KafkaService

__all__ = ["KafkaService"]
