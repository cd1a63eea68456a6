"""``nereus admin``: a ``pulsar-admin``-like command over the broker's admin REST API.

One module per command group (tenants, namespaces, topics, subscriptions, schemas,
brokers, clusters); ``http.py`` makes the calls, ``output.py`` prints tables or, with
``--json``, the REST JSON as is. A failed call prints one line (``not found: ...``) and
exits with 1.
"""

from __future__ import annotations

import click

from . import auth, client_conf, rates  # noqa: F401 - rates adds its commands to namespaces and topics
from .brokers import brokers
from .clusters import clusters
from .http import AdminClient
from .namespaces import namespaces
from .schemas import schemas
from .session import Session
from .subscriptions import subscriptions
from .tenants import tenants
from .topics import topics


@click.group("admin")
@click.option("--url", "--admin-url", "url", default=None,
              envvar=["NEREUS_ADMIN_URL", "PULSAR_ADMIN_URL"], show_envvar=True,
              help=f"The broker's HTTP(S) address (any broker of a cluster). Default: the client.conf's "
                   f"webServiceUrl, else {client_conf.DEFAULT_URL}.")
@click.option("--conf", "conf_path", envvar="PULSAR_CLIENT_CONF", show_envvar=True,
              type=click.Path(dir_okay=False),
              help="A Pulsar client.conf (webServiceUrl, authPlugin, authParams, tlsTrustCertsFilePath, "
                   "tlsAllowInsecureConnection); options override it. Default: ~/.config/nereus/client.conf "
                   "when present.")
@click.option("--token", envvar="NEREUS_ADMIN_TOKEN", show_envvar=True,
              help="Send Authorization: Bearer TOKEN.")
@click.option("--auth-plugin", help="Pulsar's auth plugin class (AuthenticationToken or AuthenticationBasic).")
@click.option("--auth-params", help="The plugin's parameters: token:T, file:///path, {\"token\": \"T\"}; "
              "{\"userId\": \"u\", \"password\": \"p\"}.")
@click.option("--tls-trust-cert-path", type=click.Path(dir_okay=False),
              help="PEM file of the CAs trusted for https:// (a private CA); default: the system's.")
@click.option("--tls-allow-insecure", is_flag=True, help="Accept any server certificate (no verification).")
@click.option("--request-timeout", type=click.FloatRange(min=0.1), default=60, show_default=True,
              help="Seconds to wait for each answer.")
@click.option("--json", "as_json", is_flag=True, help="Print REST answers as JSON.")
@click.pass_context
def admin(ctx: click.Context, url, conf_path, token, auth_plugin, auth_params, tls_trust_cert_path,
          tls_allow_insecure, request_timeout, as_json) -> None:
    """Administer tenants, namespaces, topics, subscriptions and schemas over the REST API."""
    connection = client_conf.resolve(conf_path=conf_path, url=url, token=token, auth_plugin=auth_plugin,
                                     auth_params=auth_params, trust_file=tls_trust_cert_path,
                                     allow_insecure=tls_allow_insecure)
    headers = auth.headers(token=connection.token, plugin=connection.auth_plugin, params=connection.auth_params)
    client = AdminClient(connection.url, headers=headers, timeout=request_timeout,
                         ssl_context=connection.ssl_context())
    ctx.obj = Session(client, as_json=as_json)


for _group in (tenants, namespaces, topics, subscriptions, schemas, brokers, clusters):
    admin.add_command(_group)

__all__ = ["admin"]
