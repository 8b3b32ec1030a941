"""PyTorch backend (imports torch only from its modules, never from here)."""
