"""Neighbour graphs (rings and chains of ranks) for strategies whose ranks pass data along."""
