"""torchvision and timm classifiers by name: `torchvision:<name>` (`get_model(name,
weights=None, ...)`) and `timm:<name>` (`create_model(name, pretrained=False, ...)`), random
weights, nothing downloaded, trained in torch on synthetic images.

The data is declared NCHW, the layout torch models take: these models have no Keras version,
so nothing is ever transposed. Query keys: `size`, `classes`, `samples`, `lr`; every other
key is passed to the library's factory (`timm:vit_tiny_patch16_224?img_size=32`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mpbench.workloads.user import Built, Resolved, UserWorkload
from mpbench.workloads.zoo import (
    CLI_KEYS,
    Options,
    ZooName,
    close_matches,
    held_out,
    import_package,
    one_line,
    parameter_count,
    resolved,
    timm_missing,
    torchvision_missing,
    version,
)
from mpbench.workloads.zoo.data import IMAGES, images

SIZE = 32  # image height and width
CLASSES = 10
SAMPLES = 512  # training images; the test set is a fifth as many again
BATCH_SIZE = 32
EPOCHS = 1
LEARNING_RATE = 1e-3  # Adam's
NO_DOWNLOAD = "random weights only: nothing is downloaded"


@dataclass(frozen=True)
class Library:
    """How one library names and builds its classifiers."""

    package: str
    names: Callable[[Any], list[str] | None]  # the classifiers it offers (None: unknown)
    factory: Callable[[Any, str, int, dict[str, Any]], Any]  # (package, name, classes, kwargs)
    fixed: dict[str, Any]  # what mpbench passes besides the number of classes (the record)
    owned: dict[str, str]  # keys refused in a query, with why


def _torchvision_names(torchvision: Any) -> list[str] | None:
    models = torchvision.models
    listed = getattr(models, "list_models", None)
    return list(listed(module=models)) if listed else None  # the classifiers only


def _torchvision_model(torchvision: Any, model: str, classes: int, kwargs: dict) -> Any:
    return torchvision.models.get_model(model, weights=None, num_classes=classes, **kwargs)


def _timm_model(timm: Any, model: str, classes: int, kwargs: dict) -> Any:
    return timm.create_model(model, pretrained=False, num_classes=classes, **kwargs)


LIBRARIES = {
    "torchvision": Library(
        "torchvision",
        _torchvision_names,
        _torchvision_model,
        {"weights": None},
        {
            "weights": NO_DOWNLOAD,
            "weights_backbone": NO_DOWNLOAD,
            "progress": NO_DOWNLOAD,
            "num_classes": "use classes=N",
        },
    ),
    "timm": Library(
        "timm",
        lambda timm: list(timm.list_models()),
        _timm_model,
        {"pretrained": False},
        {
            "pretrained": NO_DOWNLOAD,
            "pretrained_cfg": NO_DOWNLOAD,
            "pretrained_cfg_overlay": NO_DOWNLOAD,
            "checkpoint_path": NO_DOWNLOAD,
            "num_classes": "use classes=N",
        },
    ),
}


def resolve(name: ZooName) -> Resolved:
    library = LIBRARIES[name.zoo]
    install = torchvision_missing() if name.zoo == "torchvision" else timm_missing()
    package = import_package(name, library.package, install)
    model = name.model
    if name.zoo == "timm" and model.startswith(("hf-hub:", "hf_hub:", "local-dir:")):
        raise name.invalid(f"{model}: {NO_DOWNLOAD} (name a timm architecture)")
    known = library.names(package)
    if known is not None and model not in known:
        raise name.invalid(
            f"unknown {library.package} classifier {model!r}{close_matches(model, known)}; "
            f"e.g. {', '.join(sorted(known)[:6])} ({len(known)} in {library.package} "
            f"{version(package)})"
        )
    options = Options(name)
    options.refuse({**CLI_KEYS, **library.owned})
    size = options.integer("size", SIZE)
    classes = options.integer("classes", CLASSES, minimum=2)
    samples = options.integer("samples", SAMPLES, minimum=5)
    lr = options.number("lr", LEARNING_RATE)
    kwargs = dict(options.left)  # the factory's; checked by building the model (check)

    def data(seed: int) -> tuple[Any, ...]:
        return held_out(samples, lambda n: images(n, size, classes, seed, "NCHW"))

    def torch_build(device: Any) -> tuple[Any, Any, Any]:
        import torch

        built = library.factory(package, model, classes, kwargs)
        optimizer = torch.optim.Adam(built.parameters(), lr=lr)
        return built.to(device), optimizer, classification_loss

    about = (
        f"{library.package} {model}, random weights, {classes} classes; synthetic "
        f"{size}x{size} RGB images (NCHW)"
    )

    def check() -> Built:
        import torch

        try:
            with torch.device("meta"):  # shapes only: a size the model cannot take fails here
                built = library.factory(package, model, classes, kwargs)
                built(torch.empty(2, 3, size, size))
        except Exception as exc:
            raise name.invalid(
                f"{library.package} {model} refused it ({type(exc).__name__}: {one_line(exc)})"
            ) from None
        params = parameter_count(built)
        described = about.replace(", random weights", f", {params:,} parameters, random weights", 1)
        return Built(described, params, "Adam")

    workload = UserWorkload(
        name=f"{name.zoo}:{model}",
        data=data,
        torch=torch_build,
        batch_size=BATCH_SIZE,
        epochs=EPOCHS,
        description=about,
        layout="NCHW",
    )
    record = {
        "model": model,
        "arguments": {**library.fixed, "num_classes": classes, **kwargs},
        "size": size,
        "classes": classes,
        "samples": samples,
        "lr": lr,
        "optimizer": "Adam",
        "data": IMAGES,
    }
    return resolved(name, package, workload, check, record)


def classification_loss(logits: Any, y: Any) -> Any:
    from torch.nn.functional import cross_entropy

    return cross_entropy(logits, y)
