"""Consumer groups: the classic protocol and KIP-848's, their coordinator, committed offsets and lag."""
