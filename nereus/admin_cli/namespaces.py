"""``nereus admin namespaces``: list, create, delete, policies, topics, unload, retention, persistence,
deduplication, replication clusters."""

from __future__ import annotations

import click

from . import persistence, retention
from .args import _q, actions_list, csv_list, namespace_path
from .session import group, json_option, pass_session

namespaces = group("namespaces", "Namespaces: list, create, delete, policies, retention, deduplication, "
                                "replication clusters, permissions.")


@namespaces.command("list")
@click.argument("tenant")
@json_option
@pass_session
def list_namespaces(s, tenant):
    """List the namespaces of TENANT."""
    s.emit(s.client.get(f"/namespaces/{_q(tenant)}"))


@namespaces.command("create")
@click.argument("namespace")
@pass_session
def create(s, namespace):
    """Create NAMESPACE (tenant/namespace)."""
    s.client.put(f"/namespaces/{namespace_path(namespace)}")


@namespaces.command("delete")
@click.argument("namespace")
@click.option("-f", "--force", is_flag=True, help="Delete its topics too.")
@pass_session
def delete(s, namespace, force):
    """Delete NAMESPACE (it must be empty, unless --force)."""
    s.client.delete(f"/namespaces/{namespace_path(namespace)}", query={"force": "true"} if force else None)


@namespaces.command("policies")
@click.argument("namespace")
@json_option
@pass_session
def policies(s, namespace):
    """Show NAMESPACE's policies."""
    s.emit(s.client.get(f"/namespaces/{namespace_path(namespace)}"))


@namespaces.command("bundles")
@click.argument("namespace")
@json_option
@pass_session
def bundles(s, namespace):
    """Show NAMESPACE's bundles (one, covering the whole hash range)."""
    s.emit(s.client.get(f"/namespaces/{namespace_path(namespace)}/bundles"))


@namespaces.command("topics")
@click.argument("namespace")
@json_option
@pass_session
def topics(s, namespace):
    """List NAMESPACE's topics."""
    s.emit(s.client.get(f"/namespaces/{namespace_path(namespace)}/topics"))


@namespaces.command("unload")
@click.argument("namespace")
@click.option("-b", "--bundle", default=None, help="A bundle of NAMESPACE (Nereus has one: the whole namespace).")
@pass_session
def unload(s, namespace, bundle):
    """Unload every topic of NAMESPACE: clients reconnect (in a cluster, a topic may move)."""
    s.client.put(f"/namespaces/{namespace_path(namespace)}" + (f"/{_q(bundle)}/unload" if bundle else "/unload"))


@namespaces.command("get-retention")
@click.argument("namespace")
@json_option
@pass_session
def get_retention(s, namespace):
    """Show NAMESPACE's retention."""
    s.emit(s.client.get(f"/namespaces/{namespace_path(namespace)}/retention"), view=retention.view)


@namespaces.command("set-retention")
@click.argument("namespace")
@retention.options
@pass_session
def set_retention(s, namespace, size, time_):
    """Keep acknowledged messages of NAMESPACE's topics for a time or size."""
    s.client.post(f"/namespaces/{namespace_path(namespace)}/retention", retention.body(size, time_))


@namespaces.command("remove-retention")
@click.argument("namespace")
@pass_session
def remove_retention(s, namespace):
    """Remove NAMESPACE's retention."""
    s.client.delete(f"/namespaces/{namespace_path(namespace)}/retention")


@namespaces.command("get-persistence")
@click.argument("namespace")
@json_option
@pass_session
def get_persistence(s, namespace):
    """Show NAMESPACE's persistence policies (unset: the broker defaults)."""
    s.emit(s.client.get(f"/namespaces/{namespace_path(namespace)}/persistence"), view=persistence.view)


@namespaces.command("set-persistence")
@click.argument("namespace")
@persistence.options
@pass_session
def set_persistence(s, namespace, **policy):
    """Set NAMESPACE's persistence policies (later writes of its topics follow them)."""
    s.client.post(f"/namespaces/{namespace_path(namespace)}/persistence", persistence.body(**policy))


@namespaces.command("remove-persistence")
@click.argument("namespace")
@pass_session
def remove_persistence(s, namespace):
    """Remove NAMESPACE's persistence policies (the broker defaults apply)."""
    s.client.delete(f"/namespaces/{namespace_path(namespace)}/persistence")


@namespaces.command("get-deduplication")
@click.argument("namespace")
@json_option
@pass_session
def get_deduplication(s, namespace):
    """Show whether NAMESPACE deduplicates (unset: the broker default)."""
    value = s.client.get(f"/namespaces/{namespace_path(namespace)}/deduplication")
    s.emit(value, view=lambda v: "not set (broker default)" if v is None else ("enabled" if v else "disabled"))


@namespaces.command("set-deduplication")
@click.argument("namespace")
@click.option("-e", "--enable", "enable", flag_value=True, default=None, help="Deduplicate producers' messages.")
@click.option("-d", "--disable", "enable", flag_value=False, help="Do not deduplicate.")
@pass_session
def set_deduplication(s, namespace, enable):
    """Enable (-e) or disable (-d) deduplication on NAMESPACE."""
    if enable is None:
        raise click.UsageError("give --enable or --disable")
    s.client.post(f"/namespaces/{namespace_path(namespace)}/deduplication", enable)


@namespaces.command("remove-deduplication")
@click.argument("namespace")
@pass_session
def remove_deduplication(s, namespace):
    """Remove NAMESPACE's deduplication policy (the broker default applies)."""
    s.client.delete(f"/namespaces/{namespace_path(namespace)}/deduplication")


@namespaces.command("get-clusters")
@click.argument("namespace")
@json_option
@pass_session
def get_clusters(s, namespace):
    """Show the clusters NAMESPACE's topics replicate to."""
    s.emit(s.client.get(f"/namespaces/{namespace_path(namespace)}/replication"))


@namespaces.command("set-clusters")
@click.argument("namespace")
@click.option("-c", "--clusters", required=True, help="Comma-separated clusters (each allowed for the tenant).")
@pass_session
def set_clusters(s, namespace, clusters):
    """Replicate NAMESPACE's topics to CLUSTERS (list the local cluster too)."""
    s.client.post(f"/namespaces/{namespace_path(namespace)}/replication", csv_list(clusters))


@namespaces.command("permissions")
@click.argument("namespace")
@json_option
@pass_session
def permissions(s, namespace):
    """Show the roles granted actions on NAMESPACE."""
    s.emit(s.client.get(f"/namespaces/{namespace_path(namespace)}/permissions"))


@namespaces.command("grant-permission")
@click.argument("namespace")
@click.option("--role", required=True, help="The role granted the actions.")
@click.option("--actions", required=True, help="Comma-separated: produce, consume (functions, sources, ...).")
@pass_session
def grant_permission(s, namespace, role, actions):
    """Grant ROLE the actions on every topic of NAMESPACE (replacing its earlier grant)."""
    s.client.post(f"/namespaces/{namespace_path(namespace)}/permissions/{_q(role)}", actions_list(actions))


@namespaces.command("revoke-permission")
@click.argument("namespace")
@click.option("--role", required=True, help="The role whose grant is removed.")
@pass_session
def revoke_permission(s, namespace, role):
    """Revoke ROLE's grant on NAMESPACE."""
    s.client.delete(f"/namespaces/{namespace_path(namespace)}/permissions/{_q(role)}")


@namespaces.command("subscription-permission")
@click.argument("namespace")
@json_option
@pass_session
def subscription_permission(s, namespace):
    """Show the roles allowed on each restricted subscription name of NAMESPACE."""
    s.emit(s.client.get(f"/namespaces/{namespace_path(namespace)}/permissions/subscription"))


@namespaces.command("grant-subscription-permission")
@click.argument("namespace")
@click.option("--subscription", required=True, help="The subscription name restricted to the roles.")
@click.option("--roles", required=True, help="Comma-separated roles allowed to use the subscription name.")
@pass_session
def grant_subscription_permission(s, namespace, subscription, roles):
    """Allow ROLES to subscribe with SUBSCRIPTION on NAMESPACE (other roles may not, once it has roles)."""
    s.client.post(f"/namespaces/{namespace_path(namespace)}/permissions/subscription/{_q(subscription)}",
                  [r.strip() for r in roles.split(",") if r.strip()])


@namespaces.command("revoke-subscription-permission")
@click.argument("namespace")
@click.option("--subscription", required=True, help="The subscription name.")
@click.option("--role", required=True, help="The role removed from the subscription's roles.")
@pass_session
def revoke_subscription_permission(s, namespace, subscription, role):
    """Remove ROLE from the roles allowed to subscribe with SUBSCRIPTION on NAMESPACE."""
    s.client.delete(f"/namespaces/{namespace_path(namespace)}/permissions/{_q(subscription)}/{_q(role)}")
