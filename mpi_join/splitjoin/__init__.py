"""`splitjoin`: a top-down distribution tree, join cores that split storing from processing, and
ordered output through a merge tree with relaxed adjustable punctuation (graph.py, roles.py,
rap.py)."""
