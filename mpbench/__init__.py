"""mpbench: what mixed precision really buys you, measured on your hardware."""

__version__ = "0.1.0"
