"""How a cell runs (docs/architecture.md): one process per cell, started by process.py as a
new interpreter running cell.py or forked by its framework's fork server (zygote.py); a
torch cell of more than one replica starts a torchrun job (torchrun.py), each rank running
rank.py."""
