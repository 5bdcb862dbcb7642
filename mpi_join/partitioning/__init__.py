"""Hash partitioning of equi-join streams, partition groups and their placement on slaves."""
from .hashing import PartitionMap, Partitioner, group_rows

__all__ = ["Partitioner", "PartitionMap", "group_rows"]
