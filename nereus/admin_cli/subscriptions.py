"""``nereus admin subscriptions``: list, create, reset-cursor, skip, clear-backlog, delete (unsubscribe).

The same commands are under ``topics`` with ``pulsar-admin``'s names (``subscriptions``,
``create-subscription``, ``reset-cursor``, ``skip``, ``clear-backlog``, ``unsubscribe``).
"""

from __future__ import annotations

import click

from . import args
from .args import _q, topic_path
from .session import group, json_option, pass_session

subscriptions = group("subscriptions", "Subscriptions of a topic: list, create, reset-cursor, skip, clear-backlog, "
                                       "delete.", aliases={"reset": "reset-cursor"})

_sub = click.option("-s", "--subscription", required=True, help="Subscription name.")


def _path(topic: str, sub: str) -> str:
    return f"{topic_path(topic)}/subscription/{_q(sub)}"


@click.command("list")
@click.argument("topic")
@json_option
@pass_session
def list_subscriptions(s, topic):
    """List TOPIC's subscriptions."""
    s.emit(s.client.get(f"{topic_path(topic)}/subscriptions"))


@click.command("create")
@click.argument("topic")
@_sub
@click.option("-m", "--messageId", "--message-id", "position", default="latest", show_default=True,
              help="Where it starts: latest, earliest or ledgerId:entryId.")
@pass_session
def create(s, topic, subscription, position):
    """Create a durable subscription on TOPIC."""
    s.client.put(_path(topic, subscription), args.message_id(position))


@click.command("reset-cursor")
@click.argument("topic")
@_sub
@click.option("-t", "--time", "time_", help="Back to this long ago (10m, 2h, 1d) or to an ISO date-time.")
@click.option("-m", "--messageId", "--message-id", "position", help="To this message: ledgerId:entryId, "
                                                                    "earliest or latest.")
@click.option("-e", "--exclude-reset-position", is_flag=True, help="Start after the message given by -m.")
@pass_session
def reset_cursor(s, topic, subscription, time_, position, exclude_reset_position):
    """Move a subscription back or forward (connected consumers are moved too)."""
    if (time_ is None) == (position is None):
        raise click.UsageError("give either --time or --messageId")
    if time_ is not None:
        s.client.post(f"{_path(topic, subscription)}/resetcursor/{args.reset_timestamp_ms(time_)}")
        return
    mid = args.message_id(position)
    if exclude_reset_position:
        mid["isExcluded"] = True
    s.client.post(f"{_path(topic, subscription)}/resetcursor", mid)


@click.command("skip")
@click.argument("topic")
@_sub
@click.option("-n", "--count", type=click.IntRange(0), required=True, help="Number of messages to skip.")
@pass_session
def skip(s, topic, subscription, count):
    """Skip (acknowledge) the next COUNT messages of a subscription."""
    s.client.post(f"{_path(topic, subscription)}/skip/{count}")


@click.command("clear-backlog")
@click.argument("topic")
@_sub
@pass_session
def clear_backlog(s, topic, subscription):
    """Skip every message of a subscription's backlog."""
    s.client.post(f"{_path(topic, subscription)}/skip_all")


@click.command("delete")
@click.argument("topic")
@_sub
@click.option("-f", "--force", is_flag=True, help="Disconnect its consumers first.")
@pass_session
def delete(s, topic, subscription, force):
    """Delete a subscription (unsubscribe)."""
    s.client.delete(_path(topic, subscription), query={"force": "true"} if force else None)


for command in (list_subscriptions, create, reset_cursor, skip, clear_backlog, delete):
    subscriptions.add_command(command)
subscriptions.add_command(delete, "unsubscribe")

#: pulsar-admin's names of these commands under ``topics``.
TOPIC_COMMANDS = {"subscriptions": list_subscriptions, "create-subscription": create, "reset-cursor": reset_cursor,
                  "skip": skip, "clear-backlog": clear_backlog, "unsubscribe": delete}
