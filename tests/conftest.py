"""Shared by every test folder: this file puts tests/ on sys.path (pytest's default import
mode), so helpers such as tests/processes.py import as top-level modules."""

import signal

# A shell starts a background job (`pytest ... &`) with SIGINT ignored, and exec keeps an
# ignored signal ignored: every `mpbench run` the tests start would then ignore the Ctrl-C
# the signal tests send it. Handled signals are reset to the default at exec, so the
# children get Python's usual KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
