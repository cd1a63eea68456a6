"""``nereus admin``: a ``pulsar-admin``-like command over the broker's admin REST API.

One module per command group (tenants, namespaces, topics, subscriptions, schemas,
brokers, clusters); ``http.py`` makes the calls, ``output.py`` prints tables or, with
``--json``, the REST JSON as is. A failed call prints one line (``not found: ...``) and
exits with 1.
"""

from __future__ import annotations

import click

from . import auth, rates  # noqa: F401 - rates adds its commands to namespaces and topics
from .brokers import brokers
from .clusters import clusters
from .http import AdminClient
from .namespaces import namespaces
from .schemas import schemas
from .session import Session
from .subscriptions import subscriptions
from .tenants import tenants
from .topics import topics

DEFAULT_URL = "http://localhost:8080"


@click.group("admin")
@click.option("--url", "--admin-url", "url", default=DEFAULT_URL, show_default=True,
              envvar=["NEREUS_ADMIN_URL", "PULSAR_ADMIN_URL"], show_envvar=True,
              help="The broker's HTTP address (any broker of a cluster).")
@click.option("--token", envvar="NEREUS_ADMIN_TOKEN", show_envvar=True,
              help="Send Authorization: Bearer TOKEN.")
@click.option("--auth-plugin", help="Pulsar's auth plugin class (token or basic).")
@click.option("--auth-params", help="The plugin's parameters (token:T, file:/path, or JSON).")
@click.option("--request-timeout", type=click.FloatRange(min=0.1), default=60, show_default=True,
              help="Seconds to wait for each answer.")
@click.option("--json", "as_json", is_flag=True, help="Print REST answers as JSON.")
@click.pass_context
def admin(ctx: click.Context, url, token, auth_plugin, auth_params, request_timeout, as_json) -> None:
    """Administer tenants, namespaces, topics, subscriptions and schemas over the REST API."""
    headers = auth.headers(token=token, plugin=auth_plugin, params=auth_params)
    ctx.obj = Session(AdminClient(url, headers=headers, timeout=request_timeout), as_json=as_json)


for _group in (tenants, namespaces, topics, subscriptions, schemas, brokers, clusters):
    admin.add_command(_group)

__all__ = ["admin"]
