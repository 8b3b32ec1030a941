"""TensorFlow / Keras 3 backend (docs/architecture.md, docs/measurement.md).

Importing this package must not import TensorFlow: the runner imports `backend` inside the
cell's own process, and TensorFlow is imported there only once its logging is configured.
"""
