"""Hash partitioning of equi-join streams on their key columns, shared by the strategies that
route by key (hash, biclique, the test strategies), and hash's extendible partition groups."""
from .hashing import Partitioner, group_rows

__all__ = ["Partitioner", "group_rows"]
