"""Hash partitioning of equi-join streams, partition groups and their placement on slaves."""
from .hashing import Partitioner, PartitionMap

__all__ = ["Partitioner", "PartitionMap"]
