"""Master-side roles: the source that replays the merged stream, and strategy dispatchers."""
