"""The data path: Produce, Fetch (compacted topics included), ListOffsets, OffsetForLeaderEpoch, DeleteRecords."""
