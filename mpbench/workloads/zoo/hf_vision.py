"""Hugging Face image classifiers by name: `hf:vit`, `hf:convnext`, `hf:swin`, `hf:resnet`,
... (issue 56, item 3): `AutoModelForImageClassification.from_config`, random weights,
trained in torch on synthetic images of the configuration's size and channels.

A type with an image classifier and no text model (vit, deit, swin, convnext, resnet, ...)
is one by default; `task=image-classification` asks for it where a type has both
(perceiver). The images are the zoo's learnable ones (data.images: a coarse pattern per
class under noise), NCHW, of the configuration's `image_size` and `num_channels`; a
configuration without an image size (resnet, regnet) takes mpbench's `image_size` key.
Query keys: `num_labels` (or `labels`), `samples`, `lr`, `attn_implementation`, `task`;
every other key is the configuration's, checked as for text models (hf.py), a list as
comma-separated values (`hidden_sizes=8,16,32,64`).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import numpy as np

from mpbench.workloads.user import Built, Resolved, UserWorkload
from mpbench.workloads.zoo import (
    Options,
    ZooName,
    held_out,
    hf,
    import_package,
    one_line,
    parameter_count,
    query_value,
    resolved,
)
from mpbench.workloads.zoo.data import IMAGES, images

IMAGE_CLASSIFICATION = "image-classification"
AUTO_CLASS = "AutoModelForImageClassification"
_MAPPING = "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"
_TEXT_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
)
SIZE = 224  # the image side of a configuration that has none (ResNet's ImageNet size)
LABELS = 10  # classes, as the torchvision zoo's
SAMPLES = 512  # training images; the test set is a fifth as many again
BATCH_SIZE = 32
EPOCHS = 1
LEARNING_RATE = 1e-3  # AdamW's: a small model from scratch learns the patterns in an epoch
OWN_KEYS = (
    "task, num_labels (or labels), samples, lr, attn_implementation, image_size (where the "
    "config has none)"
)
SEQ_LEN = (
    "an image model's input is the config's image_size (or mpbench's image_size, where the "
    "config has none), not a sequence"
)


def wanted(name: ZooName, model_type: str) -> bool:
    """Whether `name` is an image classifier's: task=image-classification, or a type with
    an image classifier and no text model (whatever the task: resolve says what it trains)."""
    from transformers.models.auto import modeling_auto

    text = any(model_type in getattr(modeling_auto, m) for m in _TEXT_MAPPINGS)
    image_only = not text and model_type in getattr(modeling_auto, _MAPPING)
    return image_only or name.options.get("task") == IMAGE_CLASSIFICATION


def resolve(name: ZooName, model_type: str) -> Resolved:
    transformers = import_package(name, "transformers")
    model_class = _model_class(name, transformers, model_type)
    options = Options(name)
    options.refuse({**_refused(hf.REFUSED), "seq_len": SEQ_LEN})
    task = options.choice("task", IMAGE_CLASSIFICATION, (*hf.TASKS, IMAGE_CLASSIFICATION))
    if task != IMAGE_CLASSIFICATION:
        raise name.invalid(
            f"{model_type} has no {task} model in transformers: hf: trains it as "
            f"task={IMAGE_CLASSIFICATION}, the default"
        )
    labels = _labels(name, options)
    samples = options.integer("samples", SAMPLES, minimum=5)  # a fifth of it is the test set
    lr = options.number("lr", LEARNING_RATE)
    attn = hf.attention(name, options)
    default = hf._default_config(model_type)
    own_size = _image_size(default) is None  # then image_size is mpbench's key
    side = options.integer("image_size", SIZE) if own_size else None
    keys = _lists(options.left, default)
    config = hf._config(name, model_type, keys, default, own=OWN_KEYS)
    config.num_labels = labels
    # The class to build, as a checkpoint names it: the Auto class reads it where a type has
    # two (deit, levit: with and without a teacher), and fails without it (transformers 5).
    config.architectures = [model_class]
    height, width = (side, side) if side else _checked_size(name, config, model_type)
    channels = _channels(name, config, model_type)
    build_kwargs = {"attn_implementation": attn} if attn else {}

    def data(seed: int) -> tuple[np.ndarray, ...]:
        """(x_train, y_train, x_test, y_test): NCHW float32 images in [0, 1], their classes."""
        return held_out(
            samples, lambda n: images(n, (height, width), labels, seed, "NCHW", channels)
        )

    def build() -> Any:
        auto = getattr(transformers, AUTO_CLASS)
        return auto.from_config(copy.deepcopy(config), **build_kwargs)

    def torch_build(device: Any) -> tuple[Any, Any, Any]:
        import torch

        model = build()
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        return model.to(device), optimizer, hf.classification_loss

    shape = f"{channels}-channel {height}x{width}"
    about = (
        f"{model_class} ({IMAGE_CLASSIFICATION}) from transformers' {model_type} config, random "
        f"weights, {labels} classes; synthetic {shape} images (NCHW)"
    )

    def check() -> Built:
        try:
            import torch
        except ImportError:  # its torch cells are skipped, with the reason; nothing to build
            return Built(about, optimizer="AdamW")
        from mpbench.workloads.zoo.meta_forward import meta_forward, meta_only

        with torch.device("meta"):  # shapes only: an image size the model cannot take fails
            try:
                model = build()
                meta_forward(model, pixel_values=torch.empty(2, channels, height, width))
            except Exception as exc:
                if not meta_only(exc):  # meta's limit, not the model's: a cell is the judge
                    raise name.invalid(
                        f"transformers' {model_class} cannot train on {shape} images: "
                        f"{type(exc).__name__}: {one_line(exc)}"
                    ) from None
        params = parameter_count(model)
        described = f"{model_class}, {params:,} parameters; " + about.split("; ", 1)[1]
        return Built(described, params, "AdamW")

    workload = UserWorkload(
        name=f"hf:{model_type}",
        data=data,
        torch=torch_build,
        batch_size=BATCH_SIZE,
        epochs=EPOCHS,
        description=about,
        output="logits",
        layout="NCHW",
    )
    record = {
        "model_type": model_type,
        "task": IMAGE_CLASSIFICATION,
        "model_class": model_class,
        "image_size": [height, width],
        "image_size_from": "mpbench" if own_size else "config",
        "num_channels": channels,
        "labels": labels,
        "samples": samples,
        "lr": lr,
        "optimizer": "AdamW",
        "attn_implementation": attn,
        "data": IMAGES,
        "config": hf._config_dict(config),
    }
    return resolved(name, transformers, workload, check, record)


def _model_class(name: ZooName, transformers: Any, model_type: str) -> str:
    """The image classifier's class name; InvalidInput where the type has none, or where
    it does not take pixels (ImageGPT's takes colour-cluster ids)."""
    from transformers.models.auto import modeling_auto

    found = hf._class_name(getattr(modeling_auto, _MAPPING).get(model_type))
    if found is None:
        raise name.invalid(
            f"{model_type} has no image-classification model in transformers (leave task out: "
            "hf: trains it as the text model it is)"
        )
    model = getattr(transformers, found, None)
    takes = inspect.signature(model.forward).parameters if model is not None else {}
    if "pixel_values" not in takes:
        first = next((p for p in takes if p != "self"), "no pixel_values")
        raise name.invalid(
            f"{found} takes {first}, not pixel_values: hf: trains image classifiers on pixels"
        )
    return found


def _refused(text_refused: dict[str, str]) -> dict[str, str]:
    """The text models' refused keys, less num_labels: an image model's class count is its
    own key here (the configuration's name for it)."""
    return {key: why for key, why in text_refused.items() if key != "num_labels"}


def _labels(name: ZooName, options: Options) -> int:
    """The number of classes: num_labels (the configuration's key) or labels (hf: text
    models' key), not both."""
    if "num_labels" in options.left and "labels" in options.left:
        raise name.invalid("num_labels and labels are the same key: give one")
    key = "labels" if "labels" in options.left else "num_labels"
    return options.integer(key, LABELS, minimum=2)


def _lists(keys: dict[str, Any], default: Any) -> dict[str, Any]:
    """The query's values, a comma-separated one made a list where the configuration's
    default is a list (ConvNeXt's hidden_sizes=8,16,32,64; depths=1,1,1,1)."""
    defaults = default.to_dict() if default is not None else {}
    out = dict(keys)
    for key, value in keys.items():
        if isinstance(defaults.get(key), list | tuple):
            parts = value.split(",") if isinstance(value, str) else [value]
            out[key] = [
                query_value(part.strip()) if isinstance(part, str) else part for part in parts
            ]
    return out


def _image_size(config: Any) -> Any:
    """The configuration's image size (its vision configuration's, for a two-tower model),
    as it stores it; None where it keeps none."""
    for holder in (config, getattr(config, "vision_config", None)):
        found = getattr(holder, "image_size", None) if holder is not None else None
        if found is not None:
            return found
    return None


def _checked_size(name: ZooName, config: Any, model_type: str) -> tuple[int, int]:
    """(height, width) from the configuration's image_size: an int, or two."""
    found = _image_size(config)
    sides = list(found) if isinstance(found, list | tuple) else [found, found]
    if len(sides) != 2 or not all(_positive(side) for side in sides):
        raise name.invalid(
            f"the {model_type} config's image_size must be a positive integer or two, not {found!r}"
        )
    return sides[0], sides[1]


def _channels(name: ZooName, config: Any, model_type: str) -> int:
    found = None
    for holder in (config, getattr(config, "vision_config", None)):
        if holder is not None and getattr(holder, "num_channels", None) is not None:
            found = holder.num_channels
            break
    found = 3 if found is None else found
    if not _positive(found):
        raise name.invalid(
            f"the {model_type} config's num_channels must be a positive integer, not {found!r}"
        )
    return found


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
