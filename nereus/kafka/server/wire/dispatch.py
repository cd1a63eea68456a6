"""API key -> handler. A handler returns a response, None (no response), or an awaitable of one."""

from __future__ import annotations

from ..admin import cluster_api as cluster, configs_api as configs, topics_api as admin

from ..data import data

from ..groups import consumer_api as consumer_group_api, group_api, txn_offsets

from ..security import acl_api, quotas, sasl_api

from ..share import offsets_api as share_offsets, share_api

from ..txn import txn_api
from ..admin.cluster_api import api_versions_response

HANDLERS = {
    0: data.handle_produce,
    1: data.handle_fetch,
    2: data.handle_list_offsets,
    3: cluster.handle_metadata,
    8: group_api.handle_offset_commit,
    9: group_api.handle_offset_fetch,
    10: cluster.handle_find_coordinator,
    11: group_api.handle_join_group,
    12: group_api.handle_heartbeat,
    13: group_api.handle_leave_group,
    14: group_api.handle_sync_group,
    15: group_api.handle_describe_groups,
    16: group_api.handle_list_groups,
    17: sasl_api.handle_sasl_handshake,
    18: cluster.handle_api_versions,
    19: admin.handle_create_topics,
    20: admin.handle_delete_topics,
    21: data.handle_delete_records,
    22: cluster.handle_init_producer_id,
    23: data.handle_offset_for_leader_epoch,
    24: txn_api.handle_add_partitions_to_txn,
    25: txn_api.handle_add_offsets_to_txn,
    26: txn_api.handle_end_txn,
    27: txn_api.handle_write_txn_markers,
    28: txn_offsets.handle_txn_offset_commit,
    29: acl_api.handle_describe_acls,
    30: acl_api.handle_create_acls,
    31: acl_api.handle_delete_acls,
    32: configs.handle_describe_configs,
    33: configs.handle_alter_configs,
    36: sasl_api.handle_sasl_authenticate,
    37: admin.handle_create_partitions,
    42: group_api.handle_delete_groups,
    44: configs.handle_incremental_alter_configs,
    48: quotas.handle_describe_client_quotas,
    49: quotas.handle_alter_client_quotas,
    50: sasl_api.handle_describe_user_scram_credentials,
    51: sasl_api.handle_alter_user_scram_credentials,
    60: cluster.handle_describe_cluster,
    61: txn_api.handle_describe_producers,
    65: txn_api.handle_describe_transactions,
    66: txn_api.handle_list_transactions,
    68: consumer_group_api.handle_consumer_group_heartbeat,
    69: consumer_group_api.handle_consumer_group_describe,
    76: share_api.handle_share_group_heartbeat,
    77: share_api.handle_share_group_describe,
    78: share_api.handle_share_fetch,
    79: share_api.handle_share_acknowledge,
    90: share_offsets.handle_describe_share_group_offsets,
    91: share_offsets.handle_alter_share_group_offsets,
    92: share_offsets.handle_delete_share_group_offsets,
}

__all__ = ["HANDLERS", "api_versions_response"]
