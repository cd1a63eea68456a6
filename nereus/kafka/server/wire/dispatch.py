"""API key -> handler, each bound to its room's context.

A handler is called with the connection, the request header and the request; it
returns a response, None (no response), or an awaitable of one.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

from ..admin import cluster_api, configs_api, replicas_api, topic_partitions_api, topics_api
from ..admin.context import AdminContext
from ..data import fetch, offsets, produce
from ..data.context import DataContext
from ..groups import consumer_api, group_api
from ..groups.context import GroupContext
from ..security import acl_api, quota_api, sasl_api
from ..security.context import SecurityContext
from ..share import fetch_api as share_fetch, offsets_api as share_offsets, share_api
from ..share.context import ShareContext
from ..txn import offsets_api as txn_offsets, producers, txn_api
from ..txn.context import TxnContext
from .versions import handle_api_versions


def handlers(*, admin: AdminContext, data: DataContext, txn: TxnContext, groups: GroupContext, share: ShareContext,
             security: SecurityContext) -> dict[int, Callable]:
    """The handler of each API key this broker serves."""
    return {
        0: partial(produce.handle_produce, data),
        1: partial(fetch.handle_fetch, data),
        2: partial(offsets.handle_list_offsets, data),
        3: partial(cluster_api.handle_metadata, admin),
        8: partial(group_api.handle_offset_commit, groups),
        9: partial(group_api.handle_offset_fetch, groups),
        10: partial(cluster_api.handle_find_coordinator, admin),
        11: partial(group_api.handle_join_group, groups),
        12: partial(group_api.handle_heartbeat, groups),
        13: partial(group_api.handle_leave_group, groups),
        14: partial(group_api.handle_sync_group, groups),
        15: partial(group_api.handle_describe_groups, groups),
        16: partial(group_api.handle_list_groups, groups),
        17: partial(sasl_api.handle_sasl_handshake, security),
        18: handle_api_versions,
        19: partial(topics_api.handle_create_topics, admin),
        20: partial(topics_api.handle_delete_topics, admin),
        21: partial(offsets.handle_delete_records, data),
        22: partial(producers.handle_init_producer_id, txn),
        23: partial(offsets.handle_offset_for_leader_epoch, data),
        24: partial(txn_api.handle_add_partitions_to_txn, txn),
        25: partial(txn_api.handle_add_offsets_to_txn, txn),
        26: partial(txn_api.handle_end_txn, txn),
        27: partial(txn_api.handle_write_txn_markers, txn),
        28: partial(txn_offsets.handle_txn_offset_commit, txn),
        29: partial(acl_api.handle_describe_acls, security),
        30: partial(acl_api.handle_create_acls, security),
        31: partial(acl_api.handle_delete_acls, security),
        32: partial(configs_api.handle_describe_configs, admin),
        33: partial(configs_api.handle_alter_configs, admin),
        34: partial(replicas_api.handle_alter_replica_log_dirs, admin),
        35: partial(replicas_api.handle_describe_log_dirs, admin),
        36: partial(sasl_api.handle_sasl_authenticate, security),
        37: partial(topics_api.handle_create_partitions, admin),
        42: partial(group_api.handle_delete_groups, groups),
        43: partial(replicas_api.handle_elect_leaders, admin),
        44: partial(configs_api.handle_incremental_alter_configs, admin),
        45: partial(replicas_api.handle_alter_partition_reassignments, admin),
        46: partial(replicas_api.handle_list_partition_reassignments, admin),
        47: partial(group_api.handle_offset_delete, groups),
        48: partial(quota_api.handle_describe_client_quotas, security),
        49: partial(quota_api.handle_alter_client_quotas, security),
        50: partial(sasl_api.handle_describe_user_scram_credentials, security),
        51: partial(sasl_api.handle_alter_user_scram_credentials, security),
        60: partial(cluster_api.handle_describe_cluster, admin),
        61: partial(producers.handle_describe_producers, txn),
        65: partial(txn_api.handle_describe_transactions, txn),
        66: partial(txn_api.handle_list_transactions, txn),
        68: partial(consumer_api.handle_consumer_group_heartbeat, groups),
        69: partial(consumer_api.handle_consumer_group_describe, groups),
        74: partial(configs_api.handle_list_config_resources, admin),
        75: partial(topic_partitions_api.handle_describe_topic_partitions, admin),
        76: partial(share_api.handle_share_group_heartbeat, share),
        77: partial(share_api.handle_share_group_describe, share),
        78: partial(share_fetch.handle_share_fetch, share),
        79: partial(share_fetch.handle_share_acknowledge, share),
        90: partial(share_offsets.handle_describe_share_group_offsets, share),
        91: partial(share_offsets.handle_alter_share_group_offsets, share),
        92: partial(share_offsets.handle_delete_share_group_offsets, share),
    }


__all__ = ["handlers"]
