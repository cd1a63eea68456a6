"""Share groups (KIP-932): memberships, share-partitions over durable cursors, share sessions and offsets."""
