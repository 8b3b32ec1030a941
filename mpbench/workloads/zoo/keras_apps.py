"""Keras applications by name: `keras:<Application>[?size=32&classes=10&...]`, e.g.
`keras:MobileNetV2`, built by `keras.applications` with `weights=None` (random weights,
nothing downloaded), trained in Keras on synthetic NHWC images.

The Keras mixed-precision guide keeps the output softmax in float32; an application's last
Dense runs in the policy's compute dtype, so mpbench builds it with
`classifier_activation=None` and puts a float32 softmax after it.
"""

from __future__ import annotations

import inspect
import math
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
    resolved,
)
from mpbench.workloads.zoo.data import IMAGES, images

SIZE = 32  # image height and width (MobileNetV2's and ResNet50's least)
CLASSES = 10
SAMPLES = 512  # training images; the test set is a fifth as many again
BATCH_SIZE = 32
EPOCHS = 1
LEARNING_RATE = 1e-3  # Adam's
# What mpbench passes itself: each refused as a query key, with why.
OWNED = {
    "weights": "random weights only (weights=None): nothing is downloaded",
    "include_top": "the classifier is part of the model",
    "input_shape": "use size=N",
    "input_tensor": "use size=N",
    "classifier_activation": "the softmax is mpbench's, in float32",
}


def applications(keras: Any) -> dict[str, Any]:
    """`keras.applications`' model functions by name (its submodules left out)."""
    found = {}
    for attr in dir(keras.applications):
        value = getattr(keras.applications, attr)
        if attr[:1].isupper() and callable(value) and not inspect.ismodule(value):
            found[attr] = value
    return found


def _check_keys(name: ZooName, app_name: str, app: Any, keys: dict[str, Any]) -> None:
    """Every key left in the query is one the application's function takes."""
    accepted = set(inspect.signature(app).parameters) - set(OWNED) - {"classes"}
    for key in keys:
        if key not in accepted:
            raise name.invalid(
                f"keras.applications.{app_name} takes no {key!r}"
                f"{close_matches(key, sorted(accepted))}; mpbench's own keys: size, classes, "
                "samples, lr"
            )


def resolve(name: ZooName) -> Resolved:
    keras = import_package(name, "keras")
    apps = applications(keras)
    lowered = {a.lower(): a for a in apps}
    app_name = name.model if name.model in apps else lowered.get(name.model.lower())
    if app_name is None:
        raise name.invalid(
            f"unknown keras application {name.model!r}{close_matches(name.model, list(apps))}; "
            f"valid choices: {', '.join(sorted(apps))}"
        )
    options = Options(name)
    options.refuse({**CLI_KEYS, **OWNED})
    size = options.integer("size", SIZE)
    classes = options.integer("classes", CLASSES, minimum=2)
    samples = options.integer("samples", SAMPLES, minimum=5)
    lr = options.number("lr", LEARNING_RATE)
    _check_keys(name, app_name, apps[app_name], options.left)
    arguments = {
        "weights": None,
        "input_shape": (size, size, 3),
        "classes": classes,
        "classifier_activation": None,
        **options.left,
    }

    def data(seed: int) -> tuple[Any, ...]:
        return held_out(samples, lambda n: images(n, size, classes, seed, "NHWC"))

    def keras_build() -> tuple[Any, Any, Any]:
        import keras

        base = getattr(keras.applications, app_name)(**arguments)
        # The softmax in float32 whatever the policy (the Keras mixed-precision guide).
        probabilities = keras.layers.Activation("softmax", dtype="float32", name="float32_softmax")
        model = keras.Model(base.inputs, probabilities(base.outputs[0]), name=base.name)
        loss = keras.losses.SparseCategoricalCrossentropy()
        return model, keras.optimizers.Adam(lr), loss

    about = (
        f"keras.applications.{app_name}, random weights, {classes} classes, float32 softmax; "
        f"synthetic {size}x{size}x3 images (NHWC)"
    )

    def check() -> Built:
        try:
            model, _, _ = keras_build()
        except Exception as exc:
            said = one_line(exc)
            raise name.invalid(f"keras.applications.{app_name} refused it: {said}") from None
        # Trainable parameters, as the record counts them (BatchNorm's statistics apart).
        trainable = sum(math.prod(w.shape) for w in model.trainable_weights)
        described = about.replace(
            ", random weights", f", {trainable:,} parameters, random weights", 1
        )
        return Built(described, trainable, "Adam")

    workload = UserWorkload(
        name=f"keras:{app_name}",
        data=data,
        keras=keras_build,
        batch_size=BATCH_SIZE,
        epochs=EPOCHS,
        description=about,
        layout="NHWC",
    )
    record = {
        "application": app_name,
        "arguments": {**arguments, "input_shape": [size, size, 3]},
        "output": "float32 softmax after the application's logits",
        "size": size,
        "classes": classes,
        "samples": samples,
        "lr": lr,
        "optimizer": "Adam",
        "data": IMAGES,
    }
    return resolved(name, keras, workload, check, record)
