"""Import TensorFlow quietly: its C++ and Python logs stay out of the user's terminal."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def _stderr_fd_silenced() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null. TensorFlow's C++ start-up banner (oneDNN, CUDA
    stubs, CPU features) is written through absl before TF_CPP_MIN_LOG_LEVEL is honoured, so
    only a descriptor-level redirect keeps it out; Python exceptions still surface afterwards."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def import_tensorflow(verbose: bool) -> Any:
    """Return the `tensorflow` module, with its logging quiet unless `verbose`."""
    if verbose:
        import tensorflow as tf

        return tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with _stderr_fd_silenced():
        import keras  # noqa: F401  (its import logs through the same channel)
        import tensorflow as tf
    logging.getLogger("absl").setLevel(logging.ERROR)
    tf.get_logger().setLevel(logging.ERROR)
    tf.autograph.set_verbosity(0)
    # Advice aimed at library users (e.g. about tf.data options), not at a benchmark's reader.
    warnings.filterwarnings("ignore", module=r"(keras|tensorflow)(\.|$)")
    return tf
