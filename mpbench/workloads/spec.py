"""The reference workloads as data: layers, optimizer, defaults, and analytic FLOPs.

A spec is resolved for one cell (`Workload.layers(units)`), and both backends build the same
layer list, so parameter counts and optimizer settings match across frameworks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpbench.errors import InvalidInput, unknown_choice
from mpbench.workloads import user
from mpbench.workloads.user import UserWorkload


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
    """A classifier of images (or flattened images): a layer list, the same in both
    frameworks."""

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
    kind = "classifier"  # what the backends build and feed (LanguageModel: "language_model")

    def default_units(self, device_kind: str) -> int | None:
        """Keras guide: 4096 units on an accelerator, 64 on a CPU."""
        return self.units_cpu if device_kind == "cpu" else self.units_accelerator

    def default_sizes(self, device_kind: str) -> dict[str, int]:
        """The sizes beyond `units` a cell resolves (none for a classifier)."""
        return {}

    @property
    def convolutional(self) -> bool:
        """Whether the model has convolutions (policies.rate_convolutions rates them)."""
        return any(isinstance(layer, Conv) for layer in self.layers())

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

    def activations(self, units: int | None = None) -> int:
        """Elements each sample's layers write in a forward pass: every weighted layer's
        output, its activation function's output beside it, and every pooling output (a
        Flatten is a view and writes none)."""
        shape, total = self.input_shape, 0
        for layer in self.layers(units):
            if isinstance(layer, Dense):
                shape = (layer.units,)
                total += layer.units * (2 if layer.activation else 1)
            elif isinstance(layer, Conv):
                height, width, _ = shape
                shape = (height - layer.kernel + 1, width - layer.kernel + 1, layer.filters)
                total += 2 * shape[0] * shape[1] * shape[2]
            elif isinstance(layer, MaxPool):
                height, width, channels = shape
                shape = (height // layer.size, width // layer.size, channels)
                total += shape[0] * shape[1] * shape[2]
        return total

    def bytes_per_step(self, batch_size: int, width: int, units: int | None = None) -> float:
        """Bytes a training step moves at least, with activations and weights at `width`
        bytes (the policy's compute dtype): see step_bytes."""
        sample = 1
        for dim in self.input_shape:
            sample *= dim
        return step_bytes(
            self.param_count(units),
            self.activations(units) * batch_size,
            sample * batch_size,
            width,
            OPTIMIZER_STATES[self.optimizer.name],
        )

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


# Float32 tensors the optimizer keeps per parameter: RMSprop's mean square, Adam's two moments.
OPTIMIZER_STATES = {"rmsprop": 1, "adam": 2}


def step_bytes(
    params: int, activations: float, inputs: float, width: int, optimizer_states: int
) -> float:
    """The bytes a training step must move between memory and the compute units at least,
    each tensor counted once per use and no cache reuse across uses (the roofline's lower
    bound on traffic, so its FLOPs per byte are an upper bound):
    - weights, read by the forward and the backward pass at the compute width: 2·w·P;
    - gradients, written in float32 by the backward and read by the optimizer: 2·4·P;
    - the optimizer: the float32 parameters and each state read and written: 2·4·P·(1+s);
    - activations (`activations` elements for the whole batch), at the compute width:
      written in the forward, read in the backward, their gradients written and read: 4·w·A;
    - the input batch, float32 (token ids: 8 bytes, counted as 4·2), read by the forward and
      by the first layer's weight gradient: 2·4·I.
    Left out: autocast's casts of the float32 weights (w < 4: another 4·P + w·P), the loss,
    and the optimizer's temporaries. An estimate from the spec, not a measurement."""
    weights = 2.0 * width * params
    gradients = 2.0 * 4 * params
    optimizer = 2.0 * 4 * params * (1 + optimizer_states)
    return weights + gradients + optimizer + 4.0 * width * activations + 2.0 * 4 * inputs


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


@dataclass(frozen=True)
class LMShape:
    """A decoder-only transformer's sizes: model width, heads, blocks, context, vocabulary."""

    d_model: int
    heads: int
    layers: int
    seq_len: int
    vocab: int = 256  # byte-level: every byte is a token, no tokenizer

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def check(self) -> LMShape:
        """InvalidInput (one line) where the sizes cannot make the model."""
        for name in ("d_model", "heads", "layers", "seq_len", "vocab"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"transformer {name} must be a positive integer, got {value!r}")
        if self.d_model % self.heads:
            raise InvalidInput(
                f"transformer d_model (units) {self.d_model} is not divisible by its "
                f"{self.heads} heads"
            )
        return self


@dataclass(frozen=True)
class LanguageModel:
    """A small decoder-only (GPT-style, pre-norm) language model, built alike in torch and
    Keras: token and learned position embeddings; `layers` blocks of x += Attn(LN(x)) (causal,
    `heads` heads, q/k/v/output projections with biases) and x += W2·GELU(W1·LN(x)) (4x wide,
    exact erf GELU); a final LayerNorm; a head tied to the token embedding (no bias). Every
    weight starts from N(0, 0.02), biases 0, LayerNorm 1/0, epsilon 1e-5 (Keras' default is
    1e-3: spelled out). Its cells train next-token prediction on a byte stream."""

    name: str
    dataset: str  # a text dataset of mpbench.data (byte-level)
    optimizer: OptimizerSpec
    batch_size: int  # sequences per step
    epochs: int
    cpu: LMShape
    accelerator: LMShape
    description: str = ""
    mlp_ratio: int = 4
    layer_norm_epsilon: float = 1e-5
    init_std: float = 0.02
    kind = "language_model"
    convolutional = False  # attention and dense layers only

    @property
    def units_cpu(self) -> int:
        return self.cpu.d_model

    @property
    def units_accelerator(self) -> int:
        return self.accelerator.d_model

    def _preset(self, device_kind: str) -> LMShape:
        return self.cpu if device_kind == "cpu" else self.accelerator

    def default_units(self, device_kind: str) -> int:
        """`units` is the model width, d_model."""
        return self._preset(device_kind).d_model

    def default_sizes(self, device_kind: str) -> dict[str, int]:
        preset = self._preset(device_kind)
        return {"heads": preset.heads, "layers": preset.layers, "seq_len": preset.seq_len}

    def shape(
        self,
        units: int | None = None,
        heads: int | None = None,
        layers: int | None = None,
        seq_len: int | None = None,
        device_kind: str = "accelerator",
    ) -> LMShape:
        """The sizes of one cell: each given one, else the device's preset."""
        preset = self._preset(device_kind)
        return LMShape(
            units if units is not None else preset.d_model,
            heads if heads is not None else preset.heads,
            layers if layers is not None else preset.layers,
            seq_len if seq_len is not None else preset.seq_len,
            preset.vocab,
        ).check()

    def param_count(self, units: int | None = None, **sizes: int | None) -> int:
        """V·d + T·d + L·(12·d² + 13·d) + 2·d: embeddings (the head is tied), per block
        attention 4d²+4d, MLP 8d²+5d, two LayerNorms 4d; the final LayerNorm 2d."""
        s = self.shape(units, **sizes)
        d, wide = s.d_model, self.mlp_ratio * s.d_model
        block = (4 * d * d + 4 * d) + (2 * d * wide + wide + d) + 4 * d
        return s.vocab * d + s.seq_len * d + s.layers * block + 2 * d

    def bytes_per_step(
        self, batch_size: int, width: int, units: int | None = None, **sizes: int | None
    ) -> float:
        """Bytes a training step moves at least (step_bytes), with per token the embedding
        sum d; per block its LayerNorms 2·d, q, k, v 3·d, the attention scores and their
        softmax 2·h·T, the attention output and its projection 2·d, the MLP's W1 and GELU
        outputs 2·4·d and W2's d, the two residual sums 2·d; the final LayerNorm d and the
        logits V."""
        s = self.shape(units, **sizes)
        d, t = s.d_model, s.seq_len
        wide = self.mlp_ratio * d
        block = 2 * d + 3 * d + 2 * s.heads * t + 2 * d + 2 * wide + d + 2 * d
        per_token = d + s.layers * block + d + s.vocab
        tokens = batch_size * t
        return step_bytes(
            self.param_count(units, **sizes),
            per_token * tokens,
            2 * tokens,  # int64 ids: 8 bytes, i.e. two float32s
            width,
            OPTIMIZER_STATES[self.optimizer.name],
        )

    def forward_flops(
        self, batch_size: int, units: int | None = None, **sizes: int | None
    ) -> float:
        """Per sequence L·(24·T·d² + 4·T²·d) + 2·T·d·V, a multiply-add counted as 2: q, k, v
        and output projections 8·T·d², the MLP 16·T·d², the scores Q·Kᵀ and the weighted sum
        A·V 2·T²·d each (the whole T×T square: the causal mask saves nothing in these
        counts, as in torch's FlopCounterMode), the tied head 2·T·d·V."""
        s = self.shape(units, **sizes)
        d, t = s.d_model, s.seq_len
        linear = (8 + 2 * 2 * self.mlp_ratio) * t * d * d
        attention = 4.0 * t * t * d
        per_sequence = s.layers * (linear + attention) + 2.0 * t * d * s.vocab
        return per_sequence * batch_size

    def flops_per_step(
        self, batch_size: int, units: int | None = None, **sizes: int | None
    ) -> float:
        """3 × forward: every matmul's input needs its gradient too (the embeddings are
        trained, so nothing upstream of a matmul is data), and its weight its gradient. The
        embedding lookups, LayerNorms, softmax, GELU and the optimizer are left out, as
        FlopCounterMode leaves them out; so is the recomputation of Q·Kᵀ a fused attention
        backward does on a GPU (model FLOPs, not hardware FLOPs)."""
        return 3.0 * self.forward_flops(batch_size, units, **sizes)


TRANSFORMER_LM = LanguageModel(
    name="transformer_lm",
    dataset="tinyshakespeare",
    optimizer=OptimizerSpec("adam", 1e-3, {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}),
    batch_size=32,
    epochs=1,
    cpu=LMShape(d_model=128, heads=4, layers=2, seq_len=128),
    accelerator=LMShape(d_model=512, heads=8, layers=6, seq_len=256),
    description="byte-level GPT: embeddings, pre-norm causal attention + GELU MLP blocks, "
    "tied head, Adam",
)
# transformer_lm at the size where fp8 can win (docs/workloads.md, "transformer_lm_large"):
# torchao's own H100 tables show fp8 GEMMs breaking even near 8192×4096×4096 and losing below
# 4096 in any dimension. Batch 4 × 2048 tokens makes M = 8192 for every projection; K and N are
# 4096, 12288 (q, k, v) and 16384 (the MLP). One preset for every device: the size is the
# point, so a CPU trains it too when named, at minutes a step (the run says so).
LARGE_LM_SHAPE = LMShape(d_model=4096, heads=32, layers=4, seq_len=2048)
TRANSFORMER_LM_LARGE = LanguageModel(
    name="transformer_lm_large",
    dataset="tinyshakespeare",
    optimizer=TRANSFORMER_LM.optimizer,
    batch_size=4,
    epochs=1,
    cpu=LARGE_LM_SHAPE,
    accelerator=LARGE_LM_SHAPE,
    description="transformer_lm sized for fp8: d_model 4096, MLP 16384, 4 blocks, 2048 "
    "tokens, batch 4 (every projection's GEMM at M = 8192)",
)

WORKLOADS: dict[str, Workload | LanguageModel] = {
    w.name: w for w in (MNIST_DENSE, CIFAR10_CNN, TRANSFORMER_LM, TRANSFORMER_LM_LARGE)
}
# Names that stand for a set of built-ins, chosen by the device as `--policy auto` is: the
# transformer's steps take about 0.1 s on a CPU and train a smaller model there, so `auto`
# keeps it for accelerators, where it is the workload people train. The large transformer
# runs only when named: by its FLOPs, its float32 cell takes ~0.85 s a step even on an H200.
SELECTORS = ("auto", "all")
CPU_AUTO = (MNIST_DENSE.name, CIFAR10_CNN.name)
ONLY_WHEN_NAMED = (TRANSFORMER_LM_LARGE.name,)


def resolve_workloads(names: list[str], device_kind: str) -> list[str]:
    """`names` with each selector replaced by the built-ins it stands for on this kind of
    device (`auto`: MNIST and the CNN on a CPU, every built-in on an accelerator; `all`:
    every built-in; neither takes the large transformer), in order, each once."""
    out: list[str] = []
    for name in names:
        key = name.strip().lower()
        if key == "all" or (key == "auto" and device_kind != "cpu"):
            out += [w for w in WORKLOADS if w not in ONLY_WHEN_NAMED]
        elif key == "auto":
            out += list(CPU_AUTO)
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def get_workload(name: str) -> Workload | LanguageModel | UserWorkload:
    """A built-in workload, or a user's (`package.module:name`, or an entry point's name in
    the `mpbench.workloads` group), imported here: in a cell, never in the CLI's process
    (`describe_workload` there)."""
    return _builtin_or(name, user.load)


def describe_workload(
    name: str, run_job: user.RunJob | None = None
) -> Workload | LanguageModel | user.UserWorkloadInfo:
    """What the CLI's process knows of a workload: a built-in's spec, or a user workload's
    description from a child process that imported it (user.probe, run by `run_job`)."""
    return _builtin_or(name, lambda user_name: user.probe(user_name, run_job))


def _builtin_or(name: str, user_side):
    builtin = WORKLOADS.get(name.strip().lower())
    if builtin is not None:
        return builtin
    if user.reference(name) is None:
        raise unknown_choice("workload", name, workload_choices())
    return user_side(name)


def workload_choices(selectors: bool = True) -> list[str]:
    """What a workload may be named, for a message about one that is none of them: the
    built-ins (and, with `selectors`, auto and all), the installed entry points, a module's
    and the zoos'. An entry point named like a built-in or a selector is shadowed: listed once."""
    choices = [
        *WORKLOADS,
        *(SELECTORS if selectors else ()),
        *user.entry_point_names(),
        "package.module:name",
        "hf:MODEL_TYPE",
        "keras:APPLICATION",
        "torchvision:MODEL",
        "timm:MODEL",
    ]
    return list(dict.fromkeys(choices))


def shadowed_entry_point(name: str) -> str | None:
    """What to say when `name` is a built-in workload and an installed package's entry point
    has the same name: the built-in runs, and the entry point cannot be reached by name."""
    builtin = name.strip().lower()
    if builtin not in WORKLOADS:
        return None
    found = user.entry_point(builtin)
    if found is None:
        return None
    return (
        f"workload {builtin}: the built-in runs; the installed entry point of that name "
        f"({user.ENTRY_POINT_GROUP}: {found}) is shadowed by it, so name it as {found}"
    )
