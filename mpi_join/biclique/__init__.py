"""BiStream's join-biclique (`biclique`): dispatchers route every tuple to be stored in one unit
of its own side and joined at units of the other side. graph.py the layout, roles.py the ranks'
code, routing.py ContRand, checks.py the job checks."""
