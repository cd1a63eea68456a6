"""``nereus admin clusters``: list, get, create, update, delete, peer clusters (pulsar-admin's flags)."""

from __future__ import annotations

import click

from .args import _q, csv_list
from .session import group, json_option, pass_session

clusters = group("clusters", "Clusters: list, get, create, update, delete, peer clusters.")

#: option name -> the ClusterData field it sets
_FIELDS = {"url": "serviceUrl", "url_secure": "serviceUrlTls", "broker_url": "brokerServiceUrl",
           "broker_url_secure": "brokerServiceUrlTls", "auth_plugin": "brokerClientAuthenticationPlugin",
           "auth_parameters": "brokerClientAuthenticationParameters", "tls_enable": "brokerClientTlsEnabled",
           "tls_trust_certs_filepath": "brokerClientTrustCertsFilePath",
           "tls_allow_insecure": "tlsAllowInsecureConnection"}


def _data_options(command):
    """pulsar-admin's ``clusters create`` / ``update`` flags (a flag not given leaves its field as it is)."""
    for option in reversed((
        click.option("--url", help="The cluster's admin URL (http://host:8080)."),
        click.option("--url-secure", help="The cluster's admin URL over TLS (https://host:8443)."),
        click.option("--broker-url", help="The cluster's Pulsar URL (pulsar://host:6650)."),
        click.option("--broker-url-secure", help="The cluster's Pulsar URL over TLS (pulsar+ssl://host:6651)."),
        click.option("--auth-plugin", help="The auth plugin presented there (e.g. "
                                           "org.apache.pulsar.client.impl.auth.AuthenticationToken)."),
        click.option("--auth-parameters", help="The plugin's parameters (token:T, file:///path)."),
        click.option("--tls-enable/--tls-disable", "tls_enable", default=None,
                     help="Connect to the cluster over TLS (its secure URLs)."),
        click.option("--tls-trust-certs-filepath", help="PEM file of the CAs trusted for the cluster's TLS."),
        click.option("--tls-allow-insecure/--tls-verify", "tls_allow_insecure", default=None,
                     help="Accept any certificate from the cluster (no verification)."),
    )):
        command = option(command)
    return command


def _given(options: dict) -> dict:
    return {_FIELDS[name]: value for name, value in options.items() if value is not None}


@clusters.command("list")
@json_option
@pass_session
def list_clusters(s):
    """List the clusters: this one (a standalone is ``standalone``) and the recorded remote ones."""
    s.emit(s.client.get("/clusters"))


@clusters.command("get")
@click.argument("cluster")
@json_option
@pass_session
def get(s, cluster):
    """Show a cluster's service URLs and how it is reached."""
    s.emit(s.client.get(f"/clusters/{_q(cluster)}"))


@clusters.command("create")
@click.argument("cluster")
@_data_options
@pass_session
def create(s, cluster, **options):
    """Record CLUSTER: where it is and how to authenticate there (for geo-replication)."""
    s.client.put(f"/clusters/{_q(cluster)}", _given(options))


@clusters.command("update")
@click.argument("cluster")
@_data_options
@pass_session
def update(s, cluster, **options):
    """Change CLUSTER's record (the fields given; the others stay)."""
    data = s.client.get(f"/clusters/{_q(cluster)}") or {}
    s.client.post(f"/clusters/{_q(cluster)}", {**data, **_given(options)})


@clusters.command("delete")
@click.argument("cluster")
@pass_session
def delete(s, cluster):
    """Forget CLUSTER (no tenant may allow it, no namespace replicate to it)."""
    s.client.delete(f"/clusters/{_q(cluster)}")


@clusters.command("get-peer-clusters")
@click.argument("cluster")
@json_option
@pass_session
def get_peer_clusters(s, cluster):
    """Show CLUSTER's peer clusters."""
    s.emit(s.client.get(f"/clusters/{_q(cluster)}/peers"))


@clusters.command("update-peer-clusters")
@click.argument("cluster")
@click.option("--peer-clusters", required=True, help="Comma-separated peer clusters (empty: none).")
@pass_session
def update_peer_clusters(s, cluster, peer_clusters):
    """Set CLUSTER's peer clusters."""
    s.client.post(f"/clusters/{_q(cluster)}/peers", csv_list(peer_clusters))
