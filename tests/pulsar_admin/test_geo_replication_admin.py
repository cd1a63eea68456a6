"""The admin plane of geo-replication over plain HTTP, as Pulsar answers it: remote clusters' records
(``/clusters``), tenants' allowed clusters, namespace and topic replication clusters.

The standalone is named ``home`` (``--cluster-name``): the local cluster is known by that name and
``public`` allows it."""

from __future__ import annotations

import uuid

import pytest

from tests.standalone_fixtures import shared_standalone

from .conftest import rest_path

LOCAL = "home"
standalone = shared_standalone("standalone", "geo-admin", ["--compaction-interval", "0", "--cluster-name", LOCAL])


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _remote(host: str) -> dict:
    return {"serviceUrl": f"http://{host}:8080", "brokerServiceUrl": f"pulsar://{host}:6650",
            "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "brokerClientAuthenticationParameters": "token:secret"}


@pytest.fixture
def remote(admin) -> str:
    """A recorded remote cluster, deleted after the test if nothing uses it any more."""
    name = _name("east")
    admin.ok("PUT", f"/clusters/{name}", _remote(name))
    yield name
    admin.delete(f"/clusters/{name}")


@pytest.fixture
def tenant(admin, remote) -> str:
    """A tenant allowed on the local cluster and ``remote``, with namespace ``app``."""
    name = _name("geo")
    admin.ok("PUT", f"/tenants/{name}", {"allowedClusters": [LOCAL, remote]})
    admin.ok("PUT", f"/namespaces/{name}/app")
    yield name
    admin.delete(f"/namespaces/{name}/app?force=true")
    admin.delete(f"/tenants/{name}")


def test_cluster_lifecycle(admin, standalone):
    name = _name("west")
    assert admin.ok("GET", "/clusters") == [LOCAL]
    assert admin.get(f"/clusters/{name}") == (404, {"reason": "Cluster does not exist"})
    assert admin.put(f"/clusters/{name}", _remote(name)) == (204, None)
    assert admin.put(f"/clusters/{name}", _remote(name)) == (409, {"reason": "Cluster already exists"})
    assert admin.put(f"/clusters/{LOCAL}", _remote(name))[0] == 409  # the local cluster always exists
    assert admin.ok("GET", "/clusters") == sorted([LOCAL, name])
    assert admin.ok("GET", f"/clusters/{name}") == _remote(name)

    # An update replaces the record, as Pulsar's does; unknown fields are ignored.
    tls = {"serviceUrlTls": f"https://{name}:8443", "brokerServiceUrlTls": f"pulsar+ssl://{name}:6651",
           "brokerClientTlsEnabled": True, "tlsAllowInsecureConnection": False,
           "brokerClientTrustCertsFilePath": "/etc/ca.pem", "proxyProtocol": None, "listenerName": "x"}
    assert admin.post(f"/clusters/{name}", tls) == (204, None)
    assert admin.ok("GET", f"/clusters/{name}") == {k: v for k, v in tls.items()
                                                    if v is not None and k != "listenerName"}
    missing = _name("nowhere")
    assert admin.post(f"/clusters/{missing}", _remote(missing)) == (404, {"reason": "Cluster does not exist"})
    assert admin.delete(f"/clusters/{missing}") == (404, {"reason": "Cluster does not exist"})
    assert admin.put("/clusters/bad%20name", _remote("x")) == (412, {"reason": "Cluster name is not valid"})

    assert admin.delete(f"/clusters/{name}") == (204, None)
    assert admin.get(f"/clusters/{name}")[0] == 404
    assert admin.ok("GET", "/clusters") == [LOCAL]


@pytest.mark.parametrize("body, words", [
    (None, "cluster data is required"),
    ([1], "JSON object"),
    ({"serviceUrl": "pulsar://h:6650"}, "Illegal service url"),
    ({"serviceUrlTls": "http://h:8443"}, "Illegal service tls url"),
    ({"brokerServiceUrl": "http://h:8080"}, "Illegal broker service url"),
    ({"brokerServiceUrlTls": "pulsar://h:6651"}, "Illegal broker service tls url"),
    ({"brokerServiceUrl": "pulsar://h:port"}, "Illegal broker service url"),
    ({"brokerServiceUrl": "pulsar://"}, "Illegal broker service url"),
    ({"brokerServiceUrl": 6650}, "Illegal broker service url"),
    ({"brokerClientTlsEnabled": "yes"}, "brokerClientTlsEnabled must be true or false"),
    ({"brokerClientAuthenticationParameters": {"token": "t"}}, "brokerClientAuthenticationParameters must be"),
    ({"peerClusterNames": "a,b"}, "peerClusterNames must be a list"),
])
def test_cluster_data_is_checked(admin, body, words):
    name = _name("bad")
    status, answer = admin.put(f"/clusters/{name}", body)
    assert status == 400 and words in answer["reason"], answer
    assert admin.get(f"/clusters/{name}")[0] == 404


def test_service_urls_may_list_several_hosts(admin):
    name = _name("multi")
    admin.ok("PUT", f"/clusters/{name}", {"brokerServiceUrl": "pulsar://a:6650,b:6650,c:6650",
                                          "serviceUrl": "http://a:8080,b:8080"})
    assert admin.ok("GET", f"/clusters/{name}")["brokerServiceUrl"] == "pulsar://a:6650,b:6650,c:6650"
    admin.ok("DELETE", f"/clusters/{name}")


def test_the_local_cluster_answers_its_urls_and_its_record_overlays_them(admin, standalone):
    own = admin.ok("GET", f"/clusters/{LOCAL}")
    assert own["brokerServiceUrl"] == standalone.url and own["serviceUrl"] == standalone.http
    assert own["peerClusterNames"] == []
    admin.ok("POST", f"/clusters/{LOCAL}", {"serviceUrl": "http://home.example:8080"})
    overlaid = admin.ok("GET", f"/clusters/{LOCAL}")
    assert overlaid["serviceUrl"] == "http://home.example:8080" and overlaid["brokerServiceUrl"] == standalone.url
    assert admin.ok("GET", "/clusters").count(LOCAL) == 1
    assert admin.delete(f"/clusters/{LOCAL}") == (412, {"reason": "The local cluster cannot be deleted"})


def test_peer_clusters(admin, remote):
    other = _name("north")
    assert admin.ok("GET", f"/clusters/{remote}/peers") == []
    assert admin.post(f"/clusters/{remote}/peers", [other]) == (412, {"reason": f"Peer cluster {other} does "
                                                                                 "not exist"})
    assert admin.post(f"/clusters/{remote}/peers", [remote]) == (412, {"reason": f"{remote} itself can't be "
                                                                                  "part of peer-list"})
    assert admin.post(f"/clusters/{other}/peers", [remote])[0] == 404
    admin.ok("POST", f"/clusters/{remote}/peers", [LOCAL])
    assert admin.ok("GET", f"/clusters/{remote}/peers") == [LOCAL]
    assert admin.ok("GET", f"/clusters/{remote}") == {**_remote(remote), "peerClusterNames": [LOCAL]}
    admin.ok("POST", f"/clusters/{remote}/peers", [])
    assert admin.ok("GET", f"/clusters/{remote}/peers") == []


def test_tenants_allow_known_clusters_only(admin, remote):
    name = _name("t")
    assert admin.ok("GET", "/tenants/public")["allowedClusters"] == [LOCAL]
    assert admin.put(f"/tenants/{name}", {"allowedClusters": ["nowhere"]}) == (412, {"reason": "Clusters do not "
                                                                                                 "exist"})
    assert admin.put(f"/tenants/{name}", {"allowedClusters": [LOCAL, "nowhere"]})[0] == 412
    assert admin.get(f"/tenants/{name}")[0] == 404
    admin.ok("PUT", f"/tenants/{name}", {"adminRoles": ["ops"]})  # none given: the local cluster
    assert admin.ok("GET", f"/tenants/{name}")["allowedClusters"] == [LOCAL]
    admin.ok("POST", f"/tenants/{name}", {"allowedClusters": [remote, LOCAL]})
    assert admin.ok("GET", f"/tenants/{name}")["allowedClusters"] == sorted([LOCAL, remote])
    assert admin.post(f"/tenants/{name}", {"allowedClusters": ["ghost"]})[0] == 412
    assert admin.ok("GET", f"/tenants/{name}")["allowedClusters"] == sorted([LOCAL, remote])
    admin.ok("DELETE", f"/tenants/{name}")


def test_namespace_replication_clusters(admin, remote, tenant):
    ns = f"{tenant}/app"
    assert admin.ok("GET", f"/namespaces/{ns}/replication") == [LOCAL]  # unset: the local cluster
    admin.ok("POST", f"/namespaces/{ns}/replication", [remote, LOCAL, remote])
    assert admin.ok("GET", f"/namespaces/{ns}/replication") == sorted([LOCAL, remote])
    assert admin.ok("GET", f"/namespaces/{ns}")["replication_clusters"] == sorted([LOCAL, remote])

    # Pulsar's answers: a known cluster the tenant does not allow, an unknown one, an empty list, global.
    public = f"public/{_name('ns')}"
    admin.ok("PUT", f"/namespaces/{public}")
    assert admin.post(f"/namespaces/{public}/replication", [LOCAL, remote]) == (403, {
        "reason": f"Cluster [{remote}] is not in the list of allowed clusters list for tenant [public]"})
    assert admin.post(f"/namespaces/{ns}/replication", [LOCAL, "nowhere"]) == (403, {
        "reason": "Invalid cluster id: nowhere"})
    assert admin.post(f"/namespaces/{ns}/replication", []) == (412, {
        "reason": "ClusterIds should not be null or empty"})
    assert admin.post(f"/namespaces/{ns}/replication")[0] == 412
    assert admin.post(f"/namespaces/{ns}/replication", ["global"])[0] == 412
    assert admin.post(f"/namespaces/{ns}/replication", "a,b")[0] == 400
    assert admin.post(f"/namespaces/{ns}/replication", [LOCAL, 7])[0] == 400
    assert admin.ok("GET", f"/namespaces/{ns}/replication") == sorted([LOCAL, remote])  # unchanged
    assert admin.get(f"/namespaces/{tenant}/missing/replication")[0] == 404
    assert admin.post(f"/namespaces/{tenant}/missing/replication", [LOCAL])[0] == 404

    # A namespace created with the policy in its body is checked the same way.
    created = f"{tenant}/{_name('body')}"
    assert admin.put(f"/namespaces/{created}", {"replication_clusters": ["nowhere"]}) == (403, {
        "reason": "Invalid cluster id: nowhere"})
    admin.ok("PUT", f"/namespaces/{created}", {"replication_clusters": [remote]})
    assert admin.ok("GET", f"/namespaces/{created}/replication") == [remote]
    admin.ok("DELETE", f"/namespaces/{created}")
    admin.ok("DELETE", f"/namespaces/{public}")


def test_a_cluster_in_use_is_not_deleted(admin, remote, tenant):
    status, body = admin.delete(f"/clusters/{remote}")
    assert (status, body["reason"]) == (412, f"Cluster not empty: tenant {tenant} allows it")
    admin.ok("POST", f"/namespaces/{tenant}/app/replication", [LOCAL, remote])
    admin.ok("POST", f"/tenants/{tenant}", {"allowedClusters": [LOCAL]})
    status, body = admin.delete(f"/clusters/{remote}")
    assert (status, body["reason"]) == (412, f"Cluster not empty: namespace {tenant}/app replicates to it")
    admin.ok("POST", f"/tenants/{tenant}", {"allowedClusters": [LOCAL, remote]})
    admin.ok("POST", f"/namespaces/{tenant}/app/replication", [LOCAL])
    admin.ok("POST", f"/tenants/{tenant}", {"allowedClusters": [LOCAL]})
    assert admin.delete(f"/clusters/{remote}") == (204, None)


def test_topic_replication_clusters(admin, remote, tenant):
    topic = f"persistent://{tenant}/app/{_name('orders')}"
    path = rest_path(topic) + "/replication"
    assert admin.get(path)[0] == 404  # no such topic yet
    admin.ok("PUT", rest_path(topic))
    assert admin.get(path) == (204, None)  # unset, as Pulsar answers
    assert admin.ok("GET", path + "?applied=true") == [LOCAL]  # the namespace's (unset: the local cluster)
    admin.ok("POST", f"/namespaces/{tenant}/app/replication", [LOCAL, remote])
    assert admin.ok("GET", path + "?applied=true") == sorted([LOCAL, remote])

    admin.ok("POST", path, [remote])
    assert admin.ok("GET", path) == [remote]
    assert admin.post(path, ["nowhere"]) == (403, {"reason": "Invalid cluster id: nowhere"})
    assert admin.post(path, [])[0] == 412
    admin.ok("POST", f"/tenants/{tenant}", {"allowedClusters": [LOCAL, remote]})
    other = _name("south")
    admin.ok("PUT", f"/clusters/{other}", _remote(other))
    status, body = admin.post(path, [other])
    assert status == 403 and "not in the list of allowed clusters" in body["reason"], body
    admin.ok("DELETE", f"/clusters/{other}")
    assert admin.ok("GET", path) == [remote]

    admin.ok("DELETE", path)
    assert admin.get(path) == (204, None)
    assert admin.ok("GET", path + "?applied=true") == sorted([LOCAL, remote])


def test_a_partitioned_topics_replication_applies_to_its_partitions(admin, remote, tenant):
    topic = f"persistent://{tenant}/app/{_name('parts')}"
    admin.ok("PUT", rest_path(topic) + "/partitions", 2)
    admin.ok("POST", rest_path(topic) + "/replication", [LOCAL, remote])
    assert admin.ok("GET", rest_path(topic + "-partition-1") + "/replication") == sorted([LOCAL, remote])
    admin.ok("POST", rest_path(topic + "-partition-0") + "/replication", [LOCAL])  # the partitioned topic's
    assert admin.ok("GET", rest_path(topic) + "/replication") == [LOCAL]
    admin.ok("DELETE", rest_path(topic) + "/partitions?force=true")
