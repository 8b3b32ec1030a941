"""Shared by every test folder: this file puts tests/ on sys.path (pytest's default import
mode), so helpers such as tests/processes.py import as top-level modules."""
