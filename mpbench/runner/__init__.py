"""`mpbench run`: loop.py runs the matrix (run_matrix), matrix.py expands the config into
cells, launchers/ start each cell in a process of its own, records.py turns every outcome into
a record, progress.py shows it live."""
