"""Policy changes made through any broker reach the topics this broker owns.

The admin API re-reads the policies of the topics loaded where the call landed; the
other brokers learn of the change from the metadata plane's notifications (the
namespace's ``Policies`` record or one of its ``TopicPolicies`` records changed) and
re-read the policies of their own loaded topics of that namespace. Changes arriving
while a re-read runs are gathered, one re-read per namespace.
"""

from __future__ import annotations

import logging

from ...meta import Notification, NotificationType
from ...tasks import spawn
from ...ledger.policies import POLICIES_ROOT, TOPIC_POLICIES_ROOT
from .topics import refresh_policies

log = logging.getLogger(__name__)

ROOTS = (POLICIES_ROOT + "/", TOPIC_POLICIES_ROOT + "/")


class PolicyFollower:
    """Feeds policy-record notifications to ``refresh_policies`` of a Pulsar service."""

    def __init__(self, service) -> None:
        self.service = service
        self._changed: set[tuple[str, str]] = set()  # (tenant, namespace) waiting for a re-read
        self._task = None
        self.refreshes = 0  # namespaces re-read (for tests and logs)

    def note(self, note: Notification) -> None:
        """A notification of a key under one of ``ROOTS``."""
        if note.type == NotificationType.KEY_RANGE_DELETED:
            return  # a namespace's records deleted with it: its topics are gone too
        for root in ROOTS:
            if note.key.startswith(root):
                parts = note.key[len(root):].split("/")
                if len(parts) >= 2:
                    self._changed.add((parts[0], parts[1]))
                break
        if self._changed and (self._task is None or self._task.done()):
            self._task = spawn(self._refresh(), "policy refresh after a notification")

    async def _refresh(self) -> None:
        while self._changed:
            tenant, namespace = self._changed.pop()
            try:
                await refresh_policies(self.service, tenant, namespace)
                self.refreshes += 1
            except Exception as exc:  # the next change, or the topic's next load, reads them again
                log.warning("re-reading the policies of %s/%s failed: %s", tenant, namespace, exc)


def follow_policies(service, membership) -> PolicyFollower:
    """Re-read the policies of ``service``'s loaded topics when another broker changes them."""
    follower = PolicyFollower(service)
    for root in ROOTS:
        membership.on_note(root, follower.note)
    return follower


__all__ = ["PolicyFollower", "ROOTS", "follow_policies"]
