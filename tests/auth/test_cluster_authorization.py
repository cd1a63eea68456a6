"""Under authorization, clusters are written and read in full by superusers only (a cluster's record
carries the credentials presented there); a tenant's admins set their namespaces' and topics'
replication clusters."""

from __future__ import annotations

import json

from tests.auth.rest import rest_as
from tests.standalone_fixtures import token_auth_standalone

server = token_auth_standalone("server", "clusterauth")

REMOTE = {"serviceUrl": "http://east:8080", "brokerServiceUrl": "pulsar://east:6650",
          "brokerClientAuthenticationParameters": "token:secret"}


def _rest(node, role: str, method: str, path: str, body=None):
    return rest_as(node, role, method, "/admin/v2" + path, body)


def test_cluster_writes_and_data_are_for_superusers(server):
    for method, path, body in (("PUT", "/clusters/east", REMOTE), ("POST", "/clusters/standalone", REMOTE),
                               ("POST", "/clusters/standalone/peers", []), ("DELETE", "/clusters/east", None),
                               ("GET", "/clusters/standalone", None), ("GET", "/clusters/standalone/peers", None)):
        status, answer = _rest(server, "stranger", method, path, body)
        assert status in (401, 403) and "super-user" in answer["reason"], (method, path, status, answer)
    assert _rest(server, "stranger", "GET", "/clusters/east")[0] in (401, 403)
    assert _rest(server, "admin", "GET", "/clusters/east")[0] == 404  # nothing was written

    assert _rest(server, "admin", "PUT", "/clusters/east", REMOTE)[0] == 204
    assert _rest(server, "admin", "GET", "/clusters/east") == (200, REMOTE)
    status, answer = _rest(server, "stranger", "GET", "/clusters/east")
    assert status in (401, 403) and "secret" not in json.dumps(answer)
    # Any role lists the clusters and reads this one's failure domains.
    assert _rest(server, "stranger", "GET", "/clusters") == (200, ["east", "standalone"])
    assert _rest(server, "stranger", "GET", "/clusters/standalone/failureDomains")[0] == 200


def test_tenant_admins_set_their_replication_clusters(server):
    assert _rest(server, "admin", "PUT", "/clusters/west", {"brokerServiceUrl": "pulsar://west:6650"})[0] == 204
    assert _rest(server, "admin", "PUT", "/tenants/acme", {"adminRoles": ["acme-admin"],
                                                           "allowedClusters": ["standalone", "west"]})[0] == 204
    assert _rest(server, "acme-admin", "PUT", "/tenants/acme", {})[0] in (401, 403)  # tenants: superusers
    assert _rest(server, "acme-admin", "PUT", "/namespaces/acme/app")[0] == 204
    assert _rest(server, "acme-admin", "POST", "/namespaces/acme/app/replication", ["standalone", "west"])[0] == 204
    assert _rest(server, "acme-admin", "GET", "/namespaces/acme/app/replication") == (200, ["standalone", "west"])
    assert _rest(server, "acme-admin", "PUT", "/persistent/acme/app/t")[0] == 204
    assert _rest(server, "acme-admin", "POST", "/persistent/acme/app/t/replication", ["west"])[0] == 204
    assert _rest(server, "acme-admin", "GET", "/persistent/acme/app/t/replication") == (200, ["west"])
    for method, path, body in (("POST", "/namespaces/acme/app/replication", ["standalone"]),
                               ("GET", "/namespaces/acme/app/replication", None),
                               ("POST", "/persistent/acme/app/t/replication", ["standalone"]),
                               ("DELETE", "/persistent/acme/app/t/replication", None)):
        assert _rest(server, "stranger", method, path, body)[0] in (401, 403), (method, path)
    assert _rest(server, "acme-admin", "GET", "/persistent/acme/app/t/replication") == (200, ["west"])
