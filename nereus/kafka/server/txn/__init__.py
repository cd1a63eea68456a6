"""Producer ids and transactions: InitProducerId, the transaction APIs, WriteTxnMarkers, TxnOffsetCommit, and
the data path of transactions (transactional produce, read_committed reads)."""
