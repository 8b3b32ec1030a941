"""A user workload for `mpbench run --workload examples.tabular_mlp:WORKLOAD` (run from the
repository's root: the working directory is on the path, as for `python -m`).

A small MLP classifying synthetic tabular rows (32 features, 4 classes, the class a function
of the features, so it learns), in torch and in Keras 3. The frameworks are imported inside
the builders: mpbench's CLI imports this module only in a child process, and each cell imports
only its own framework.
"""

from __future__ import annotations

import numpy as np

from mpbench.workloads import UserWorkload

FEATURES, CLASSES, HIDDEN = 32, 4, 64


def data(seed: int):
    """(x_train, y_train, x_test, y_test): float32 rows, int64 class indices."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2560, FEATURES)).astype(np.float32)
    weights = np.random.default_rng(0).standard_normal((FEATURES, CLASSES))
    y = np.argmax(x @ weights, axis=1).astype(np.int64)
    return x[:2048], y[:2048], x[2048:], y[2048:]


def torch_build(device):
    import torch
    from torch import nn

    model = nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    ).to(device)  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, optimizer, nn.functional.cross_entropy


def keras_build():
    import keras

    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(HIDDEN, activation="relu"),
            # The logits' softmax in float32, as the Keras mixed-precision guide asks.
            keras.layers.Dense(CLASSES),
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )
    return model, keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy()


WORKLOAD = UserWorkload(
    name="tabular_mlp",
    data=data,
    torch=torch_build,
    keras=keras_build,
    batch_size=64,
    epochs=2,
    description="MLP 32→64→64→4 on synthetic tabular rows, Adam",
)

# The same model in torch only: its TensorFlow cells are skipped, with the reason.
TORCH_ONLY = UserWorkload(
    name="tabular_mlp_torch", data=data, torch=torch_build, batch_size=64, epochs=1
)
