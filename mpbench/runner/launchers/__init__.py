"""How a cell runs (DESIGN.md §4): one child process (runner/execute.py and runner/child.py)
or, for a torch cell of more than one replica, a torchrun job started by that child
(torchrun.py), each rank running rank.py."""
