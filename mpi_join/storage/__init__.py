"""Data on disk: staged input (staged.py, staged_log.py, and spark/ which writes it), result files
and their commits (results.py, commits.py, tail.py), checkpoints (checkpoint.py, checksums.py),
`verify`, what is read from the input before a run (input_stats.py, input_warnings.py), and the
rules every written path obeys (paths.py, durable.py)."""
