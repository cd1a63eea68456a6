"""Under authorization a transaction belongs to the role that opened it (and to superusers)."""

from __future__ import annotations

import urllib.request

import pytest

from nereus.auth.tokens import create_token
from nereus.codec.pulsar import pb
from tests.pulsar_txn.txn_client import ServerError, TxnClient
from tests.standalone_fixtures import token_auth_standalone



server = token_auth_standalone("server", "txnauth")


def client(server, role: str) -> TxnClient:
    c = TxnClient(server.pulsar_port, token=create_token(role, secret_key=server.secret))
    c.connect_coordinator()
    return c


def test_only_the_owner_and_superusers_use_a_transaction(server):
    alice, bob, admin = client(server, "alice"), client(server, "bob"), client(server, "admin")
    try:
        topic = "persistent://public/default/owned"
        mine = alice.new_txn()
        for attempt in (lambda: bob.add_partitions(mine, [topic]), lambda: bob.end_txn(mine, commit=False),
                        lambda: bob.add_subscription(mine, topic, "s")):
            with pytest.raises(ServerError) as err:
                attempt()
            assert err.value.code == pb.AuthorizationError
            assert "not the owner" in str(err.value)
        alice.add_partitions(mine, [topic])
        alice.end_txn(mine, commit=True)
        other = alice.new_txn()
        admin.end_txn(other, commit=False)  # a superuser may
        # Broker-to-broker commands: a superuser's is run (nothing to do here), a client's refused.
        admin.request(pb.CommandEndTxnOnPartition(txnid_most_bits=0, txnid_least_bits=other[1], topic=topic,
                                                  txn_action=pb.ABORT), "END_TXN_ON_PARTITION_RESPONSE")
        with pytest.raises(ServerError) as err:
            bob.request(pb.CommandEndTxnOnPartition(txnid_most_bits=0, txnid_least_bits=other[1], topic=topic,
                                                    txn_action=pb.COMMIT), "END_TXN_ON_PARTITION_RESPONSE")
        assert err.value.code == pb.AuthorizationError
    finally:
        for c in (alice, bob, admin):
            c.close()


def test_any_authenticated_role_finds_the_coordinator(server):
    token = create_token("alice", secret_key=server.secret)
    for path in ("/admin/v2/persistent/pulsar/system/transaction_coordinator_assign/partitions",
                 "/lookup/v2/topic/persistent/pulsar/system/transaction_coordinator_assign-partition-0"):
        request = urllib.request.Request(server.http + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
