"""A model zoo by name (docs/workloads.md, "A model zoo by name"): names taken apart and
malformed ones refused in one line, without importing any library (test_zoo_hf.py builds the
models)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from refusals import one_line

from mpbench.workloads import user, zoo

ROOT = Path(__file__).resolve().parents[2]


# --- names ---------------------------------------------------------------------------------


def test_a_zoo_name_is_taken_apart_and_its_values_read_as_what_they_look_like() -> None:
    name = "hf:gpt2?n_layer=4&lr=3e-4&use_cache=false&n_inner=none&activation_function=gelu"
    parsed = zoo.parse(f"  {name} ")
    assert (parsed.text, parsed.zoo, parsed.model) == (name, "hf", "gpt2")
    assert parsed.options == {
        "n_layer": 4,
        "lr": 3e-4,
        "use_cache": False,
        "n_inner": None,
        "activation_function": "gelu",
    }
    assert zoo.parse("keras:MobileNetV2").options == {}
    assert zoo.parse("timm:vit_tiny_patch16_224?img_size=32").options == {"img_size": 32}


@pytest.mark.parametrize(
    ("name", "is_zoo"),
    [
        ("hf:gpt2", True),
        ("keras:MobileNetV2", True),
        ("torchvision:resnet50", True),
        (" timm:resnet18?size=64", True),
        ("examples.tabular_mlp:WORKLOAD", False),
        ("hfx:gpt2", False),
        ("mnist_dense", False),
    ],
)
def test_a_zoo_prefix_is_taken_by_the_zoo_before_module_attr(name: str, is_zoo: bool) -> None:
    assert zoo.is_zoo(name) is is_zoo
    if is_zoo:  # a user workload's reference, so that spec's built-in check passes it on
        assert user.is_reference(name)
        assert user.reference(name) == name.strip()


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("hf:", "name a model after 'hf:'"),
        ("hf:gpt2?n_layer", "the query must be key=value&key=value (bad query field: 'n_layer')"),
        ("hf:gpt2?n_layer=", "n_layer has no value"),
        ("hf:gpt2?n_layer=1&n_layer=2", "n_layer is given twice"),
        ("hf:gpt2?=3", "a query value without a key: =3"),
    ],
)
def test_a_malformed_name_is_one_line(name: str, said: str) -> None:
    assert one_line(name, zoo.parse).endswith(said)


def test_a_missing_attribute_lists_the_modules_workloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    said = one_line("examples.tabular_mlp:NOPE")
    assert said.endswith("module examples.tabular_mlp has no 'NOPE'; it has: TORCH_ONLY, WORKLOAD")
    (tmp_path / "zoo_empty_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert one_line("zoo_empty_module:W").endswith("it defines no UserWorkload")


# --- data ----------------------------------------------------------------------------------


def test_the_image_data_is_learnable_and_the_same_in_either_layout() -> None:
    """A nearest-class-mean rule fitted on half the images classifies the other half: the
    classes are there to be learnt (accuracy can tell a broken policy from a working one)."""
    from mpbench.workloads.zoo.data import images

    x, y = images(400, 16, 4, seed=0, layout="NHWC")
    assert x.shape == (400, 16, 16, 3) and x.dtype == np.float32 and y.dtype == np.int64
    assert x.min() >= 0 and x.max() <= 1 and set(np.unique(y)) == {0, 1, 2, 3}
    flat = x.reshape(len(x), -1)
    means = np.stack([flat[:200][y[:200] == c].mean(axis=0) for c in range(4)])
    guess = np.argmin(((flat[200:, None, :] - means[None]) ** 2).sum(axis=-1), axis=1)
    assert (guess == y[200:]).mean() > 0.9
    nchw, same_y = images(400, 16, 4, seed=0, layout="NCHW")
    assert (nchw == x.transpose(0, 3, 1, 2)).all() and (same_y == y).all()
    assert not (images(400, 16, 4, seed=1, layout="NHWC")[0] == x).all()


def test_a_sequences_class_is_a_function_of_its_tokens_and_about_balanced() -> None:
    from mpbench.workloads.zoo.data import markov_tokens, score_labels, score_thresholds

    ids = np.arange(3, 259)  # ids 0-2 reserved, as a config's special tokens are
    tokens = markov_tokens(600, 32, ids, seed=0)
    assert tokens.min() >= 3 and tokens.max() <= 258
    thresholds = score_thresholds(32, ids, 3)
    labels = score_labels(tokens, ids, thresholds)
    assert np.bincount(labels, minlength=3).min() > 600 * 0.25
    assert (score_labels(tokens[::-1], ids, thresholds) == labels[::-1]).all()
    assert (score_thresholds(32, ids, 3) == thresholds).all()  # the same for every seed


# --- installing torchvision and timm -------------------------------------------------------

CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def test_a_missing_torchvision_leads_with_the_cpu_index_beside_a_cpu_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pip install 'mpbench[vision]'` brings the default index's torchvision, which links
    CUDA and dies on import beside a CPU torch: the command that works comes first."""
    monkeypatch.setattr(zoo, "_torch_version", lambda: "2.13.0+cpu")
    said = zoo.torchvision_missing()
    assert said.startswith(f"pip install 'torchvision==0.28.*' {CPU_INDEX} (the build for torch")
    assert said.index(CPU_INDEX) < said.index("mpbench[vision]")
    monkeypatch.setattr(zoo, "_torch_version", lambda: None)
    assert zoo.torchvision_missing().startswith(f"pip install torch torchvision {CPU_INDEX}")
    monkeypatch.setattr(zoo, "_torch_version", lambda: "2.13.0+cu128")
    assert zoo.torchvision_missing().startswith(
        "pip install 'torchvision==0.28.*' --index-url https://download.pytorch.org/whl/cu128"
    )


def test_a_missing_timm_says_it_needs_the_cpu_index_torchvision_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(zoo, "_torch_version", lambda: "2.13.0+cpu")
    found = {"torchvision": None}
    monkeypatch.setattr(zoo.importlib.util, "find_spec", lambda name: found.get(name))
    said = zoo.timm_missing()
    assert said.startswith(f"pip install 'torchvision==0.28.*' {CPU_INDEX}")
    assert said.endswith(", then pip install timm (timm imports torchvision)")
    found["torchvision"] = object()  # installed already: timm alone
    assert zoo.timm_missing() == "pip install timm"


# --- what the probe says of a zoo model ----------------------------------------------------


def _info(name: str, frameworks: list[str], zoo_name: bool, **kwargs) -> user.UserWorkloadInfo:
    source = {"zoo": name.split(":")[0]} if zoo_name else {"module": name}
    return user.UserWorkloadInfo(name, frameworks, 8, 1, source=source, **kwargs)


def test_a_framework_a_workload_has_no_version_in_is_said_in_its_users_words() -> None:
    gpt2 = _info("hf:gpt2?n_layer=1", ["torch"], zoo_name=True)
    assert (
        gpt2.no_version("tensorflow")
        == "hf:gpt2 has no TensorFlow version: it trains in torch only"
    )
    assert gpt2.no_version("torch") is None
    mine = _info("m:W", ["tensorflow"], zoo_name=False)
    assert mine.no_version("torch") == (
        "m:W has no torch version: its UserWorkload has no torch builder, so it trains in "
        "TensorFlow only"
    )


def test_training_holds_the_weights_gradients_and_optimizer_states_at_least() -> None:
    adam = _info("hf:gpt2", ["torch"], zoo_name=True, params=1000, optimizer="AdamW",
                 optimizer_states=2)  # fmt: skip
    assert adam.training_bytes() == 1000 * 4 * 4
    assert _info("m:W", ["torch"], zoo_name=False).training_bytes() is None
