"""Build a workload spec as a torch module, initialised like Keras (Glorot-uniform, zero bias)
so that both frameworks start from the same kind of model."""

from __future__ import annotations

import torch
from torch import nn

from mpbench.workloads import Conv, Dense, Flatten, MaxPool, Workload


def build_model(workload: Workload, units: int | None) -> nn.Sequential:
    layers: list[nn.Module] = []
    channels = workload.input_shape[-1]
    features = workload.input_shape[-1]
    spatial = workload.input_shape[0] if len(workload.input_shape) == 3 else None
    for layer in workload.layers(units):
        if isinstance(layer, Conv):
            layers.append(nn.Conv2d(channels, layer.filters, layer.kernel))
            layers.append(nn.ReLU())
            channels = layer.filters
            spatial = spatial - layer.kernel + 1
        elif isinstance(layer, MaxPool):
            layers.append(nn.MaxPool2d(layer.size))
            spatial = spatial // layer.size
        elif isinstance(layer, Flatten):
            layers.append(nn.Flatten())
            features = channels * spatial * spatial
        elif isinstance(layer, Dense):
            layers.append(nn.Linear(features, layer.units))
            if layer.activation == "relu":
                layers.append(nn.ReLU())
            features = layer.units
    model = nn.Sequential(*layers)
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)
    return model


def build_optimizer(workload: Workload, params) -> torch.optim.Optimizer:
    """The spec's hyper-parameters, spelled the torch way (Keras `rho` is torch `alpha`)."""
    spec = workload.optimizer
    extra = spec.params
    if spec.name == "rmsprop":
        return torch.optim.RMSprop(
            params, lr=spec.learning_rate, alpha=extra["rho"], eps=extra["epsilon"]
        )
    return torch.optim.Adam(
        params,
        lr=spec.learning_rate,
        betas=(extra["beta_1"], extra["beta_2"]),
        eps=extra["epsilon"],
    )
