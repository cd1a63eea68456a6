"""The transaction coordinator commands of the binary protocol.

TC_CLIENT_CONNECT_REQUEST, NEW_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN and
END_TXN go to the protocol-neutral ``TransactionCoordinator`` (nereus.transactions);
this module only translates. A client with transactions enabled first asks for the
partitioned metadata of ``TC_ASSIGN_TOPIC`` (one partition per coordinator), looks up
``...-partition-{tcId}`` (any broker answers itself: every broker reaches the one
coordinator state in the metadata plane) and sends TC_CLIENT_CONNECT_REQUEST there.

END_TXN_ON_PARTITION and END_TXN_ON_SUBSCRIPTION (what a Pulsar coordinator sends the
brokers of a transaction's partitions) run the same participants the coordinator runs.

TxnID = (most bits = coordinator id, 0 here; least bits = a producer id from the
counter Kafka producers share), so each open transaction has a pid of its own.
``txn_ttl_seconds`` carries milliseconds: the official clients send
``unit.toMillis(timeout)`` in it, and Pulsar brokers read it so.
"""

from __future__ import annotations

import logging

from ...ledger.naming import InvalidTopicName, TopicName
from ...transactions import errors as txn_errors
from ...codec.pulsar import pb, wrap

log = logging.getLogger(__name__)

TC_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
TC_COUNT = 1  # coordinators (partitions of TC_ASSIGN_TOPIC); all state is in the metadata plane
DEFAULT_TIMEOUT_MS = 60_000  # a NEW_TXN without a timeout: the Java client's default


def txn_key(most: int, least: int) -> str:
    """The coordinator record key of a Pulsar transaction."""
    return f"pulsar:{most}:{least}"


def is_tc_topic(name: TopicName) -> bool:
    return str(name.base) == TC_ASSIGN_TOPIC


def coordinator_of(conn):
    """The broker's transaction coordinator, or None when transactions are not available."""
    return getattr(conn.service, "transactions", None)


def error_code(exc: Exception) -> int:
    """The ServerError the official clients expect for a coordinator error."""
    if isinstance(exc, (txn_errors.TransactionNotFound, txn_errors.InvalidProducerIdMapping)):
        return pb.TransactionNotFound
    if isinstance(exc, (txn_errors.InvalidTxnState, txn_errors.ProducerFenced)):
        return pb.InvalidTxnStatus
    if isinstance(exc, txn_errors.ConcurrentTransactions):
        # The transaction is being completed: the clients retry this code with backoff.
        return pb.TransactionCoordinatorNotFound
    if isinstance(exc, txn_errors.InvalidTransactionTimeout):
        return pb.NotAllowedError
    return pb.UnknownError


def _txn_ids(cmd) -> tuple[int, int]:
    return cmd.txnid_most_bits, cmd.txnid_least_bits


async def handle_tc_connect(conn, cmd: pb.CommandTcClientConnectRequest) -> None:
    response = pb.CommandTcClientConnectResponse(request_id=cmd.request_id)
    if coordinator_of(conn) is None or cmd.tc_id >= TC_COUNT:
        response.error = pb.TransactionCoordinatorNotFound
        response.message = f"transaction coordinator {cmd.tc_id} is not available"
    conn.send(wrap(response))


async def handle_new_txn(conn, cmd: pb.CommandNewTxn) -> None:
    coordinator = coordinator_of(conn)
    response = pb.CommandNewTxnResponse(request_id=cmd.request_id)
    if coordinator is None or cmd.tc_id >= TC_COUNT:
        response.error = pb.TransactionCoordinatorNotFound
        response.message = f"transaction coordinator {cmd.tc_id} is not available"
        conn.send(wrap(response))
        return
    timeout_ms = cmd.txn_ttl_seconds or DEFAULT_TIMEOUT_MS
    try:
        pid = await coordinator.new_txn(timeout_ms, owner=conn.role)
    except txn_errors.TransactionError as exc:
        response.error, response.message = error_code(exc), str(exc)
    else:
        response.txnid_most_bits, response.txnid_least_bits = cmd.tc_id, pid
        log.debug("transaction (%d,%d) opened, timeout %d ms", cmd.tc_id, pid, timeout_ms)
    conn.send(wrap(response))


async def handle_add_partition(conn, cmd: pb.CommandAddPartitionToTxn) -> None:
    most, least = _txn_ids(cmd)
    response = pb.CommandAddPartitionToTxnResponse(request_id=cmd.request_id, txnid_most_bits=most,
                                                   txnid_least_bits=least)
    try:
        partitions = [str(TopicName.parse(p)) for p in cmd.partitions]
    except InvalidTopicName as exc:
        response.error, response.message = pb.InvalidTopicName, str(exc)
        conn.send(wrap(response))
        return
    await _call(conn, response, most, lambda c: c.add_partitions(txn_key(most, least), least, 0, partitions),
                txn_key(most, least))


async def handle_add_subscription(conn, cmd: pb.CommandAddSubscriptionToTxn) -> None:
    most, least = _txn_ids(cmd)
    response = pb.CommandAddSubscriptionToTxnResponse(request_id=cmd.request_id, txnid_most_bits=most,
                                                      txnid_least_bits=least)
    try:
        subs = [(str(TopicName.parse(s.topic)), s.subscription) for s in cmd.subscription]
    except InvalidTopicName as exc:
        response.error, response.message = pb.InvalidTopicName, str(exc)
        conn.send(wrap(response))
        return
    await _call(conn, response, most, lambda c: c.add_subscriptions(txn_key(most, least), least, 0, subs),
                txn_key(most, least))


async def handle_end_txn(conn, cmd: pb.CommandEndTxn) -> None:
    most, least = _txn_ids(cmd)
    response = pb.CommandEndTxnResponse(request_id=cmd.request_id, txnid_most_bits=most, txnid_least_bits=least)
    commit = cmd.txn_action == pb.COMMIT
    await _call(conn, response, most, lambda c: c.end(txn_key(most, least), least, 0, commit), txn_key(most, least))
    if not response.HasField("error"):
        log.debug("transaction (%d,%d) %s", most, least, "committed" if commit else "aborted")


async def handle_end_on_partition(conn, cmd: pb.CommandEndTxnOnPartition) -> None:
    """A coordinator's request to write one partition's marker (idempotent, as the participants are)."""
    most, least = _txn_ids(cmd)
    response = pb.CommandEndTxnOnPartitionResponse(request_id=cmd.request_id, txnid_most_bits=most,
                                                   txnid_least_bits=least)
    await _participant(conn, response, lambda p: p.complete_partition(
        str(TopicName.parse(cmd.topic)), least, 0, cmd.txn_action == pb.COMMIT))


async def handle_end_on_subscription(conn, cmd: pb.CommandEndTxnOnSubscription) -> None:
    """A coordinator's request to apply (or drop) one subscription's pending acks."""
    most, least = _txn_ids(cmd)
    response = pb.CommandEndTxnOnSubscriptionResponse(request_id=cmd.request_id, txnid_most_bits=most,
                                                      txnid_least_bits=least)
    sub = cmd.subscription
    await _participant(conn, response, lambda p: p.complete_subscription(
        str(TopicName.parse(sub.topic)), sub.subscription, least, cmd.txn_action == pb.COMMIT))


async def _participant(conn, response, operation) -> None:
    participants = getattr(conn.service, "txn_participants", None)
    authorizer = conn.service.authorizer
    if participants is None:
        response.error, response.message = pb.TransactionCoordinatorNotFound, "transactions are not available"
    elif authorizer is not None and not authorizer.is_super_user(conn.role):
        # Brokers send these; a client could end other clients' transactions with them.
        response.error, response.message = pb.AuthorizationError, f"role {conn.role} may not end transactions here"
    else:
        try:
            await operation(participants)
        except InvalidTopicName as exc:
            response.error, response.message = pb.InvalidTopicName, str(exc)
        except txn_errors.MarkerNotWritten as exc:  # another broker serves it: the sender retries
            response.error, response.message = pb.ServiceNotReady, str(exc)
        except txn_errors.TransactionError as exc:
            response.error, response.message = error_code(exc), str(exc)
    conn.send(wrap(response))


async def not_owner(conn, coordinator, key: str) -> str | None:
    """Why the client may not use transaction ``key`` (under authorization: only the role that
    opened it, and superusers, as Pulsar checks), or None."""
    authorizer = conn.service.authorizer
    if authorizer is None or authorizer.is_super_user(conn.role):
        return None
    record = await coordinator.describe(key)
    if record is None or record.owner is None or record.owner == conn.role:
        return None
    return f"role {conn.role} is not the owner of transaction {key.split(':', 1)[1]}"


async def _call(conn, response, most: int, operation, key: str) -> None:
    coordinator = coordinator_of(conn)
    if coordinator is None:
        response.error, response.message = pb.TransactionCoordinatorNotFound, "transactions are not available"
    elif most >= TC_COUNT:
        response.error, response.message = pb.TransactionNotFound, f"no transaction coordinator {most}"
    elif (refused := await not_owner(conn, coordinator, key)) is not None:
        response.error, response.message = pb.AuthorizationError, refused
    else:
        try:
            await operation(coordinator)
        except txn_errors.TransactionError as exc:
            response.error, response.message = error_code(exc), str(exc)
    conn.send(wrap(response))


__all__ = ["TC_ASSIGN_TOPIC", "TC_COUNT", "error_code", "handle_add_partition", "handle_add_subscription",
           "handle_end_on_partition", "handle_end_on_subscription", "handle_end_txn", "handle_new_txn",
           "handle_tc_connect", "is_tc_topic", "txn_key"]
