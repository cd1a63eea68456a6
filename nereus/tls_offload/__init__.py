"""TLS offload: worker processes end TLS and relay plaintext to the broker (``tlsOffloadProcesses``).

Transport only, below the protocols: ``pool`` (the broker's side: ports, workers),
``worker`` (the worker process), ``inbound`` (the broker's end of a relayed
connection), ``proxy_header`` (the PROXY v2 header between them).
"""
