"""The cell's timeout in its environment: set by the run (process.py), read by a torchrun
job (torchrun.py) and kept out of what a fork server must match (zygote.py)."""

# In seconds: a torchrun job gives up waiting for other nodes before it (launchers/torchrun.py),
# so that it can still say why.
CELL_TIMEOUT_ENV = "MPBENCH_CELL_TIMEOUT_S"
