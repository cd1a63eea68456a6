"""``nereus admin tenants``: list, get, create, update, delete."""

from __future__ import annotations

import click

from .args import _q
from .session import group, json_option, pass_session

tenants = group("tenants", "Tenants: list, get, create, update, delete.")


def _csv(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


@tenants.command("list")
@json_option
@pass_session
def list_tenants(s):
    """List the tenants."""
    s.emit(s.client.get("/tenants"))


@tenants.command("get")
@click.argument("tenant")
@json_option
@pass_session
def get(s, tenant):
    """Show a tenant's admin roles and allowed clusters."""
    s.emit(s.client.get(f"/tenants/{_q(tenant)}"))


@tenants.command("create")
@click.argument("tenant")
@click.option("-r", "--admin-roles", help="Comma-separated admin roles.")
@click.option("-c", "--allowed-clusters", help="Comma-separated clusters (default: every cluster).")
@pass_session
def create(s, tenant, admin_roles, allowed_clusters):
    """Create a tenant."""
    clusters = _csv(allowed_clusters) or s.client.get("/clusters")
    s.client.put(f"/tenants/{_q(tenant)}", {"adminRoles": _csv(admin_roles) or [], "allowedClusters": clusters})


@tenants.command("update")
@click.argument("tenant")
@click.option("-r", "--admin-roles", help="Comma-separated admin roles (default: unchanged).")
@click.option("-c", "--allowed-clusters", help="Comma-separated clusters (default: unchanged).")
@pass_session
def update(s, tenant, admin_roles, allowed_clusters):
    """Change a tenant's admin roles or allowed clusters."""
    info = s.client.get(f"/tenants/{_q(tenant)}")
    if admin_roles is not None:
        info["adminRoles"] = _csv(admin_roles)
    if allowed_clusters is not None:
        info["allowedClusters"] = _csv(allowed_clusters)
    s.client.post(f"/tenants/{_q(tenant)}", info)


@tenants.command("delete")
@click.argument("tenant")
@pass_session
def delete(s, tenant):
    """Delete a tenant (it must have no namespaces)."""
    s.client.delete(f"/tenants/{_q(tenant)}")
