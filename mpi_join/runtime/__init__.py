"""The runtime's shared parts: the dataflow graph (graph.py), the one operator interface
(operator.py), the wire (protocol.py, headers.py, transport.py), liveness and per-rank metrics.
Its two sides are mpi_join/master (rank 0) and mpi_join/slaves (the workers); mpi_join/ranks.py
starts a rank as one or the other."""
