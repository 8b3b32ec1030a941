"""The reference workloads as data: layers, optimizer, defaults, and analytic FLOPs.

A spec is resolved for one cell (`Workload.layers(units)`), and both backends build the same
layer list, so parameter counts and optimizer settings match across frameworks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpbench.errors import unknown_choice


@dataclass(frozen=True)
class Dense:
    units: int
    activation: str | None = "relu"  # None: linear (the logits layer)


@dataclass(frozen=True)
class Conv:
    filters: int
    kernel: int
    activation: str = "relu"  # "valid" padding, stride 1: Keras' defaults


@dataclass(frozen=True)
class MaxPool:
    size: int


@dataclass(frozen=True)
class Flatten:
    pass


Layer = Dense | Conv | MaxPool | Flatten


@dataclass(frozen=True)
class OptimizerSpec:
    """Hyper-parameters spelled out, because torch and Keras defaults differ (e.g. RMSprop)."""

    name: str  # "rmsprop" | "adam"
    learning_rate: float
    params: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Workload:
    name: str
    dataset: str  # "mnist" | "cifar10": what mpbench.data loads
    input_shape: tuple[int, ...]  # per sample, channels last: (784,) or (32, 32, 3)
    num_classes: int
    optimizer: OptimizerSpec
    batch_size: int
    epochs: int
    units_accelerator: int | None = None  # dense width where the workload has one
    units_cpu: int | None = None
    description: str = ""

    def default_units(self, device_kind: str) -> int | None:
        """Keras guide: 4096 units on an accelerator, 64 on a CPU."""
        return self.units_cpu if device_kind == "cpu" else self.units_accelerator

    def layers(self, units: int | None = None) -> list[Layer]:
        if self.name == "mnist_dense":
            width = units or self.units_accelerator
            return [Dense(width), Dense(width), Dense(self.num_classes, activation=None)]
        return [
            Conv(32, 3),
            MaxPool(2),
            Conv(64, 3),
            MaxPool(2),
            Flatten(),
            Dense(128),
            Dense(self.num_classes, activation=None),
        ]

    def _walk(self, units: int | None) -> tuple[int, float, float]:
        """(trainable parameters, forward FLOPs per sample, forward FLOPs of the first
        weighted layer per sample), counting a multiply-add as 2."""
        shape = self.input_shape
        params, flops = 0, 0.0
        first: float | None = None
        for layer in self.layers(units):
            if isinstance(layer, Dense):
                fan_in = shape[-1]
                params += fan_in * layer.units + layer.units
                flops += 2.0 * fan_in * layer.units
                first = flops if first is None else first
                shape = (layer.units,)
            elif isinstance(layer, Conv):
                height, width, channels = shape
                out_h, out_w = height - layer.kernel + 1, width - layer.kernel + 1
                per_output = layer.kernel * layer.kernel * channels
                params += per_output * layer.filters + layer.filters
                flops += 2.0 * per_output * layer.filters * out_h * out_w
                first = flops if first is None else first
                shape = (out_h, out_w, layer.filters)
            elif isinstance(layer, MaxPool):
                height, width, channels = shape
                shape = (height // layer.size, width // layer.size, channels)
            else:
                total = 1
                for dim in shape:
                    total *= dim
                shape = (total,)
        return params, flops, first or 0.0

    def param_count(self, units: int | None = None) -> int:
        return self._walk(units)[0]

    def forward_flops(self, batch_size: int, units: int | None = None) -> float:
        return self._walk(units)[1] * batch_size

    def flops_per_step(self, batch_size: int, units: int | None = None) -> float:
        """Training FLOPs per step, exactly as torch's FlopCounterMode counts them: forward
        (1×) + weight gradients (1×) + input gradients (1×) of every matmul and convolution,
        except the first layer's input gradient, which nothing needs (the data requires no
        grad): 3 × forward − forward of the first layer. Pooling, activations and the
        optimizer update are left out, as the counter leaves them out."""
        _, forward, first = self._walk(units)
        return (3.0 * forward - first) * batch_size


MNIST_DENSE = Workload(
    name="mnist_dense",
    dataset="mnist",
    input_shape=(784,),
    num_classes=10,
    # Keras' RMSprop defaults, written out so torch uses the same ones.
    optimizer=OptimizerSpec("rmsprop", 1e-3, {"rho": 0.9, "epsilon": 1e-7}),
    batch_size=8192,
    epochs=5,
    units_accelerator=4096,
    units_cpu=64,
    description="Keras mixed-precision guide: 784→units→units→10, RMSprop, float32 softmax",
)

CIFAR10_CNN = Workload(
    name="cifar10_cnn",
    dataset="cifar10",
    input_shape=(32, 32, 3),
    num_classes=10,
    optimizer=OptimizerSpec("adam", 1e-3, {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}),
    batch_size=128,
    epochs=50,
    description="Conv32-3x3→MaxPool→Conv64-3x3→MaxPool→Dense128→Dense10, Adam",
)

WORKLOADS: dict[str, Workload] = {w.name: w for w in (MNIST_DENSE, CIFAR10_CNN)}


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name.strip().lower()]
    except KeyError:
        raise unknown_choice("workload", name, WORKLOADS) from None
