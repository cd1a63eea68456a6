"""Who sees what in the Iceberg REST catalog: reading a table is consuming its topic.

With authorization enabled (``authorizationEnabled``), a role:

- reads (loads, sees listed) a topic's table when it may consume from the topic: a
  superuser, an admin of the tenant, or a role granted ``consume`` on the namespace or
  the topic (Kafka's ACLs decide for the Kafka namespace's topics, as for its clients);
- sees a namespace ``[tenant, namespace]`` when it may list the namespace's topics
  (tenant admin, ``produce`` or ``consume`` granted on the namespace) or read one of
  its tables, and a tenant ``[tenant]`` when it is its admin or sees one of its
  namespaces.

Loading what the role may not see answers 403; lists leave it out. Without
authorization every authenticated request (or every request, without authentication)
sees everything, as the admin API's reads.
"""

from __future__ import annotations

from aiohttp import web

from ...auth.authorization import CONSUME
from ...ledger.naming import TopicName
from .source import Source

#: ``request -> (authorizer or None, role or None)``: who asks, as the broker's authentication and
#: authorization (which this package may not import: they stand above it) tell.
PRINCIPAL = web.AppKey("nereus_iceberg_principal", object)


class Access:
    """What the role of one request may see of ``source``."""

    def __init__(self, request: web.Request, source: Source) -> None:
        self.source = source
        self.authorizer, self.role = request.app[PRINCIPAL](request)
        self.checked = self.authorizer is not None and not self.authorizer.is_super_user(self.role)

    async def reads_table(self, tenant: str, namespace: str, name: str) -> bool:
        if not self.checked:
            return True
        return await self.authorizer.allowed(self.role, TopicName("persistent", tenant, namespace, name), CONSUME)

    async def tables(self, levels: tuple[str, ...]) -> list[str]:
        """The namespace's tables this role reads."""
        names = await self.source.table_names(levels)
        if not self.checked:
            return names
        return [name for name in names if await self.reads_table(*levels, name)]

    async def sees(self, levels: tuple[str, ...]) -> bool:
        """May this role see the namespace (which exists)?"""
        if not self.checked:
            return True
        tenant = levels[0]
        if await self.authorizer.is_tenant_admin(self.role, tenant):
            return True
        if len(levels) == 1:
            for namespace in await self.source.namespaces(tenant):
                if await self.sees((tenant, namespace)):
                    return True
            return False
        return await self.authorizer.may_list(self.role, *levels) or bool(await self.tables(levels))


__all__ = ["PRINCIPAL", "Access"]
