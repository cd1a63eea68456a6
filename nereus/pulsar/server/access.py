"""Producer access modes (PIP-68), as a Pulsar broker grants them on one topic.

Rules (the topic's owner is the one broker serving its producers, so its state decides):

- Shared: refused with ProducerBusy while an exclusive producer holds the topic or one waits.
- Exclusive: refused with ProducerFenced while any other producer is connected or waits.
- ExclusiveWithFencing: every connected producer is fenced (CLOSE_PRODUCER; its
  reconnect is refused by the epoch rule, so its sends fail) and waiters fail.
- WaitForExclusive: while others hold the topic the client gets PRODUCER_SUCCESS with
  ``producer_ready=false``; once they are gone it gets a second one with ``true``.
- Epoch: each exclusive grant bumps the topic epoch; a producer reconnecting with an
  older epoch was fenced meanwhile and is refused with ProducerFenced.

Between the grant and the producer's registration (schema, append session) the grant
is held as a claim, so two concurrent creations cannot both win.
"""

from __future__ import annotations

import asyncio
import logging

from ...codec.pulsar import pb, wrap

log = logging.getLogger(__name__)

_GIVE_UP_CHECK = 1.0  # seconds between checks that a waiting producer's client still wants it


def _state(topic) -> dict:
    state = getattr(topic, "_access", None)
    if state is None:
        state = topic._access = {"claim": False, "creating": 0}
    return state


def _settle(topic) -> None:
    """Nothing claimed or being created: the topic keeps no state (most loaded topics are idle)."""
    state = topic._access
    if state is not None and not state["claim"] and not state["creating"]:
        topic._access = None


def _live(topic) -> list:
    return [p for p in topic.producers.values() if not p.conn.closed]


def _waiting(topic) -> bool:
    return any(not f.done() for f in topic.exclusive_waiters)


def _held_exclusively(topic) -> bool:
    return _state(topic)["claim"] or any(p.exclusive for p in _live(topic))


def refusal(topic, mode: int, epoch: int | None) -> tuple[int, str] | None:
    """(error, message) if a producer of ``mode`` may not be created now; else None (and it is counted)."""
    state = _state(topic)
    if mode == pb.Shared:
        if _held_exclusively(topic) or _waiting(topic):
            return pb.ProducerBusy, f"Topic {topic.name} has an existing exclusive producer"
        state["creating"] += 1
        return None
    if epoch is not None and epoch < topic.epoch:
        return pb.ProducerFenced, f"Topic epoch has already moved: current {topic.epoch}, producer {epoch}"
    if mode == pb.Exclusive:
        if _held_exclusively(topic) or _waiting(topic):
            return pb.ProducerFenced, f"Topic {topic.name} has an existing exclusive producer"
        if _live(topic) or state["creating"]:
            return pb.ProducerFenced, f"Topic {topic.name} has existing shared producers"
        state["claim"] = True
        return None
    if mode == pb.ExclusiveWithFencing:
        state["claim"] = True
        return None
    if mode == pb.WaitForExclusive:
        return None  # claims when its turn comes (must_wait / wait_turn)
    return pb.UnknownError, f"invalid producer access mode {mode}"


def must_wait(topic) -> bool:
    """For WaitForExclusive: True if others hold the topic (else the claim is taken now)."""
    state = _state(topic)
    if _held_exclusively(topic) or _live(topic) or state["creating"] or _waiting(topic):
        return True
    state["claim"] = True
    return False


def fence_all(topic) -> None:
    """ExclusiveWithFencing: close every other producer and fail the waiting ones."""
    for future in topic.exclusive_waiters:
        if not future.done():
            future.set_result(False)
    topic.exclusive_waiters.clear()
    for producer in _live(topic):
        log.info("%s: producer %s fenced by an ExclusiveWithFencing producer", topic.name, producer.name)
        topic.close_producer(producer)


def _gone(conn, producer_id: int) -> bool:
    return conn.closed or producer_id in conn.closed_producers


async def wait_turn(conn, request_id: int, producer_id: int, topic, producer_name: str) -> bool:
    """Queue a WaitForExclusive producer; True once it holds the claim, False after an error was sent."""
    future = asyncio.get_running_loop().create_future()
    topic.exclusive_waiters.append(future)
    conn.closed_producers.discard(producer_id)
    conn.send(wrap(pb.CommandProducerSuccess(request_id=request_id, producer_name=producer_name,
                                             last_sequence_id=-1, producer_ready=False)))
    try:
        while not future.done():
            # The client may give up meanwhile (connection lost, producer closed): leave the queue.
            await asyncio.wait({future}, timeout=_GIVE_UP_CHECK)
            if not future.done() and _gone(conn, producer_id):
                future.cancel()
        granted = future.result()
    except asyncio.CancelledError:
        if not conn.closed:
            conn.send_error(request_id, pb.ServiceNotReady, f"{topic.name} moved; look it up again")
        return False
    finally:
        if future in topic.exclusive_waiters:
            topic.exclusive_waiters.remove(future)
    if not granted:
        if not conn.closed:
            conn.send_error(request_id, pb.ProducerFenced, f"fenced out of {topic.name} while waiting")
        return False
    if _gone(conn, producer_id):
        done_waiting(topic, failed=True)
        return False
    return True


def done_waiting(topic, *, failed: bool = False, mode: int | None = None) -> None:
    """The creation that held a grant registered its producer (or gave up)."""
    state = _state(topic)
    if mode == pb.Shared:
        state["creating"] = max(0, state["creating"] - 1)
    else:
        state["claim"] = False
    if failed:
        next_turn(topic)
    _settle(topic)


def next_turn(topic) -> None:
    """A producer left: the first live waiter gets the topic if nobody holds it now."""
    state = _state(topic)
    if state["claim"] or state["creating"] or _live(topic):
        return
    while topic.exclusive_waiters:
        future = topic.exclusive_waiters.pop(0)
        if not future.done():
            state["claim"] = True
            future.set_result(True)
            return
    _settle(topic)


__all__ = ["done_waiting", "fence_all", "must_wait", "next_turn", "refusal", "wait_turn"]
