"""Topic administration, configs, and what clients learn of the cluster (Metadata, FindCoordinator)."""
