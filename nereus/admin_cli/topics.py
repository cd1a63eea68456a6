"""``nereus admin topics``: create, list, delete, partitions, stats, unload, retention, replication clusters (and
subscriptions)."""

from __future__ import annotations

import click

from . import message_view, output, persistence, retention
from .args import _q, actions_list, csv_list, namespace_path, topic_path
from .session import group, json_option, pass_session
from .subscriptions import TOPIC_COMMANDS

topics = group("topics", "Topics: create, list, delete, stats, unload, retention, replication clusters, "
                         "subscriptions, permissions.",
               aliases={"create-partitioned": "create-partitioned-topic",
                        "delete-partitioned": "delete-partitioned-topic", "internal-stats": "stats-internal"})

_force = click.option("-f", "--force", is_flag=True, help="Even with connected clients (they are disconnected).")
_partitions = click.option("-p", "--partitions", type=click.IntRange(1), required=True, help="Number of partitions.")


def _force_query(force: bool):
    return {"force": "true"} if force else None


@topics.command("create")
@click.argument("topic")
@pass_session
def create(s, topic):
    """Create a non-partitioned TOPIC."""
    s.client.put(topic_path(topic))


@topics.command("create-partitioned-topic")
@click.argument("topic")
@_partitions
@pass_session
def create_partitioned(s, topic, partitions):
    """Create a partitioned TOPIC."""
    s.client.put(f"{topic_path(topic)}/partitions", partitions)


@topics.command("update-partitioned-topic")
@click.argument("topic")
@_partitions
@pass_session
def update_partitioned(s, topic, partitions):
    """Add partitions to a partitioned TOPIC."""
    s.client.post(f"{topic_path(topic)}/partitions", partitions)


@topics.command("get-partitioned-topic-metadata")
@click.argument("topic")
@json_option
@pass_session
def partitioned_metadata(s, topic):
    """Show TOPIC's number of partitions (0: not partitioned)."""
    s.emit(s.client.get(f"{topic_path(topic)}/partitions"))


@topics.command("list")
@click.argument("namespace")
@json_option
@pass_session
def list_topics(s, namespace):
    """List NAMESPACE's topics (each partition of a partitioned topic)."""
    s.emit(s.client.get(f"/persistent/{namespace_path(namespace)}"))


@topics.command("list-partitioned-topics")
@click.argument("namespace")
@json_option
@pass_session
def list_partitioned(s, namespace):
    """List NAMESPACE's partitioned topics."""
    s.emit(s.client.get(f"/persistent/{namespace_path(namespace)}/partitioned"))


@topics.command("delete")
@click.argument("topic")
@_force
@pass_session
def delete(s, topic, force):
    """Delete a non-partitioned TOPIC."""
    s.client.delete(topic_path(topic), query=_force_query(force))


@topics.command("delete-partitioned-topic")
@click.argument("topic")
@_force
@pass_session
def delete_partitioned(s, topic, force):
    """Delete a partitioned TOPIC and its partitions."""
    s.client.delete(f"{topic_path(topic)}/partitions", query=_force_query(force))


@topics.command("stats")
@click.argument("topic")
@json_option
@pass_session
def stats(s, topic):
    """Show TOPIC's rates, counters, publishers and subscriptions."""
    s.emit(s.client.get(f"{topic_path(topic)}/stats"), view=output.stats_view)


@topics.command("stats-internal")
@click.argument("topic")
@json_option
@pass_session
def internal_stats(s, topic):
    """Show TOPIC's storage view: entries, size, cursors."""
    s.emit(s.client.get(f"{topic_path(topic)}/internalStats"), view=output.internal_stats_view)


@topics.command("last-message-id")
@click.argument("topic")
@json_option
@pass_session
def last_message_id(s, topic):
    """Show the id of TOPIC's last message (entryId -1: none)."""
    s.emit(s.client.get(f"{topic_path(topic)}/lastMessageId"))


@topics.command("examine-message")
@click.argument("topic")
@click.option("-i", "--initialPosition", "initial", type=click.Choice(["latest", "earliest"]), default="latest",
              show_default=True, help="Count from the newest or the oldest message.")
@click.option("-m", "--messagePosition", "position", type=click.IntRange(1), default=1, show_default=True,
              help="Which message from there (1: the first).")
@pass_session
def examine_message(s, topic, initial, position):
    """Show one message of TOPIC: its metadata and payload."""
    message_view.show(*s.client.get(f"{topic_path(topic)}/examinemessage", raw=True,
                                query={"initialPosition": initial, "messagePosition": position}))


@topics.command("get-message-by-id")
@click.argument("topic")
@click.option("-l", "--ledgerId", "ledger", type=int, required=True, help="The message id's ledger id.")
@click.option("-e", "--entryId", "entry", type=int, required=True, help="The message id's entry id.")
@pass_session
def get_message_by_id(s, topic, ledger, entry):
    """Show the message of TOPIC with id LEDGER:ENTRY."""
    message_view.show(*s.client.get(f"{topic_path(topic)}/ledger/{ledger}/entry/{entry}", raw=True))


@topics.command("partitioned-stats")
@click.argument("topic")
@click.option("--per-partition", is_flag=True, help="Show each partition too.")
@json_option
@pass_session
def partitioned_stats(s, topic, per_partition):
    """Show a partitioned TOPIC's stats, summed over its partitions."""
    value = s.client.get(f"{topic_path(topic)}/partitioned-stats",
                         query={"perPartition": "true" if per_partition else "false"})
    s.emit(value, view=output.stats_view)


@topics.command("unload")
@click.argument("topic")
@pass_session
def unload(s, topic):
    """Unload TOPIC: its clients reconnect (in a cluster it may move to another broker)."""
    s.client.put(f"{topic_path(topic)}/unload")


@topics.command("get-persistence")
@click.argument("topic")
@click.option("--applied", is_flag=True, help="The policies in force (the topic's, else its namespace's, else the "
                                               "broker's defaults).")
@json_option
@pass_session
def get_persistence(s, topic, applied):
    """Show TOPIC's persistence policies."""
    value = s.client.get(f"{topic_path(topic)}/persistence", query={"applied": "true"} if applied else None)
    s.emit(value, view=persistence.view)


@topics.command("set-persistence")
@click.argument("topic")
@persistence.options
@pass_session
def set_persistence(s, topic, **policy):
    """Set TOPIC's persistence policies (over its namespace's; later writes follow them)."""
    s.client.post(f"{topic_path(topic)}/persistence", persistence.body(**policy))


@topics.command("remove-persistence")
@click.argument("topic")
@pass_session
def remove_persistence(s, topic):
    """Remove TOPIC's persistence policies (its namespace's apply)."""
    s.client.delete(f"{topic_path(topic)}/persistence")


@topics.command("get-retention")
@click.argument("topic")
@click.option("--applied", is_flag=True, help="The retention in force (the topic's, else its namespace's).")
@json_option
@pass_session
def get_retention(s, topic, applied):
    """Show TOPIC's retention."""
    value = s.client.get(f"{topic_path(topic)}/retention", query={"applied": "true"} if applied else None)
    s.emit(value, view=retention.view)


@topics.command("set-retention")
@click.argument("topic")
@retention.options
@pass_session
def set_retention(s, topic, size, time_):
    """Keep TOPIC's acknowledged messages for a time or size (overrides the namespace's)."""
    s.client.post(f"{topic_path(topic)}/retention", retention.body(size, time_))


@topics.command("remove-retention")
@click.argument("topic")
@pass_session
def remove_retention(s, topic):
    """Remove TOPIC's retention (its namespace's applies)."""
    s.client.delete(f"{topic_path(topic)}/retention")


@topics.command("get-replication-clusters")
@click.argument("topic")
@click.option("--applied", is_flag=True, help="The clusters in force (the topic's, else its namespace's).")
@json_option
@pass_session
def get_replication_clusters(s, topic, applied):
    """Show the clusters TOPIC replicates to."""
    value = s.client.get(f"{topic_path(topic)}/replication", query={"applied": "true"} if applied else None)
    s.emit(value, view=lambda v: "not set (the namespace's apply)" if v is None else "\n".join(v))


@topics.command("set-replication-clusters")
@click.argument("topic")
@click.option("-c", "--clusters", required=True, help="Comma-separated clusters (each allowed for the tenant).")
@pass_session
def set_replication_clusters(s, topic, clusters):
    """Replicate TOPIC to CLUSTERS (overrides its namespace's)."""
    s.client.post(f"{topic_path(topic)}/replication", csv_list(clusters))


@topics.command("remove-replication-clusters")
@click.argument("topic")
@pass_session
def remove_replication_clusters(s, topic):
    """Remove TOPIC's replication clusters (its namespace's apply)."""
    s.client.delete(f"{topic_path(topic)}/replication")


for _name, _command in TOPIC_COMMANDS.items():
    topics.add_command(_command, _name)


@topics.command("permissions")
@click.argument("topic")
@json_option
@pass_session
def permissions(s, topic):
    """Show the roles granted actions on TOPIC (its namespace's grants included)."""
    s.emit(s.client.get(f"{topic_path(topic)}/permissions"))


@topics.command("grant-permission")
@click.argument("topic")
@click.option("--role", required=True, help="The role granted the actions.")
@click.option("--actions", required=True, help="Comma-separated: produce, consume.")
@pass_session
def grant_permission(s, topic, role, actions):
    """Grant ROLE the actions on TOPIC (replacing its earlier grant on the topic)."""
    s.client.post(f"{topic_path(topic)}/permissions/{_q(role)}", actions_list(actions))


@topics.command("revoke-permission")
@click.argument("topic")
@click.option("--role", required=True, help="The role whose grant on the topic is removed.")
@pass_session
def revoke_permission(s, topic, role):
    """Revoke ROLE's grant on TOPIC."""
    s.client.delete(f"{topic_path(topic)}/permissions/{_q(role)}")
