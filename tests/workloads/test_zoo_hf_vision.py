"""Hugging Face image classifiers by name (issue 56, item 3: zoo/hf_vision.py): `hf:vit`,
`hf:convnext`, `hf:resnet`, ... built from their configurations (real transformers, tiny
sizes), trained on synthetic images of the configuration's size and channels whose classes
the pixels say; FLOPs from mpbench's counter, checked against a ViT's analytic count; bad
names refused in one line, and through the real command with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli import run_mpbench
from frameworks import installed
from refusals import one_line, refusal_line

from mpbench.workloads import user

pytestmark = pytest.mark.skipif(
    not (installed("transformers") and installed("torch")), reason="needs transformers and torch"
)

# A 2-layer ViT of width 32 on 32×32 images in 8×8 patches: 16 patches and the class token.
D, LAYERS, MLP, SIDE, PATCH, CHANNELS, LABELS = 32, 2, 64, 32, 8, 3, 4
VIT = (
    f"hf:vit?hidden_size={D}&num_hidden_layers={LAYERS}&num_attention_heads=2"
    f"&intermediate_size={MLP}&image_size={SIDE}&patch_size={PATCH}&num_labels={LABELS}"
    "&samples=64"
)
CONVNEXT = "hf:convnext?hidden_sizes=8,16,32,64&depths=1,1,1,1&image_size=32"
TINY = ("--warmup-steps", "1", "--repeat", "1", "--device", "cpu", "--threads", "1")


def vit_params() -> int:
    """The tiny ViT's parameters, layer by layer."""
    tokens = (SIDE // PATCH) ** 2 + 1
    embeddings = (CHANNELS * PATCH * PATCH * D + D) + D + tokens * D  # patches, [CLS], positions
    block = 2 * 2 * D + 4 * (D * D + D) + (D * MLP + MLP) + (MLP * D + D)  # 2 norms, q k v o, MLP
    return embeddings + LAYERS * block + 2 * D + (D * LABELS + LABELS)


def vit_training_flops(batch: int) -> int:
    """A training step's matmul FLOPs of the tiny ViT, from its shapes: the forward's patch
    embedding (a convolution), q/k/v/o projections, the attention's two products, the MLP
    and the head (on the class token); the backward twice the forward, less the patch
    embedding's input gradient (the pixels need none)."""
    patches = (SIDE // PATCH) ** 2
    tokens = patches + 1
    patch_embedding = 2 * patches * (CHANNELS * PATCH * PATCH) * D
    attention = 4 * 2 * tokens * D * D + 2 * 2 * tokens * tokens * D
    mlp = 2 * 2 * tokens * D * MLP
    head = 2 * D * LABELS
    return batch * (2 * patch_embedding + 3 * (LAYERS * (attention + mlp) + head))


def test_a_tiny_vit_by_name_is_the_model_its_config_says() -> None:
    import torch

    workload = user.load(VIT)
    assert (workload.name, workload.frameworks, workload.output) == ("hf:vit", ["torch"], "logits")
    assert (workload.layout, workload.batch_size) == ("NCHW", 32)
    model, optimizer, loss = workload.torch(torch.device("cpu"))
    assert type(model).__name__ == "ViTForImageClassification"
    assert isinstance(optimizer, torch.optim.AdamW)
    assert sum(p.numel() for p in model.parameters()) == vit_params() == 24_036
    described = user.describe(VIT)  # the probe: built on the meta device, one forward there
    assert described["description"] == (
        "ViTForImageClassification, 24,036 parameters; synthetic 3-channel 32x32 images (NCHW)"
    )
    assert described["params"] == vit_params()
    x, y, x_test, _ = workload.data(0)
    assert (x.shape, y.shape, x_test.shape) == ((64, 3, 32, 32), (64,), (12, 3, 32, 32))
    assert x.dtype == np.float32 and x.min() >= 0 and x.max() <= 1
    assert set(np.unique(y)) <= set(range(LABELS))
    out = model(torch.from_numpy(x[:4]))
    assert tuple(out.logits.shape) == (4, LABELS)
    assert torch.isfinite(loss(out.logits.float(), torch.from_numpy(y[:4])))
    source = user.source(VIT)
    assert (source["task"], source["image_size"], source["num_channels"]) == (
        "image-classification",
        [32, 32],
        3,
    )
    assert len(source["config"]["id2label"]) == LABELS
    assert source["config"]["architectures"] == ["ViTForImageClassification"]


def test_the_classes_are_learnable_from_the_pixels() -> None:
    """Each class is a pattern under noise: the nearest class mean of the training images
    names almost every test image's class (so a model's accuracy can rise above chance)."""
    x, y, x_test, y_test = user.load(VIT).data(0)
    means = np.stack([x[y == c].mean(axis=0) for c in range(LABELS)])
    distances = ((x_test[:, None] - means[None]) ** 2).sum(axis=(2, 3, 4))
    assert (distances.argmin(axis=1) == y_test).mean() >= 0.9


def test_a_vits_flops_are_its_analytic_count() -> None:
    import torch

    from mpbench.backends.torch.flops import counted

    workload = user.load(VIT)
    model, _, loss = workload.torch(torch.device("cpu"))
    x, y, _, _ = workload.data(0)
    xb, yb = torch.from_numpy(x[:4]), torch.from_numpy(y[:4])
    count = counted(model, lambda: loss(model(xb).logits.float(), yb).backward())
    assert count.total == vit_training_flops(4) == 9_148_416


@pytest.mark.parametrize(
    ("name", "model_class", "shape"),
    [
        (CONVNEXT, "ConvNextForImageClassification", (3, 32, 32)),  # lists as a,b,c
        ("hf:swin?embed_dim=16&depths=1,1&num_heads=1,2&image_size=32&patch_size=4"
         "&window_size=4", "SwinForImageClassification", (3, 32, 32)),
        # Two classes for one type (with and without a teacher): the first, named in the config.
        ("hf:deit?hidden_size=32&num_hidden_layers=1&num_attention_heads=2&intermediate_size=64"
         "&image_size=32&patch_size=8", "DeiTForImageClassification", (3, 32, 32)),
        # No image size in a ResNet config: mpbench's image_size key; one channel.
        ("hf:resnet?embedding_size=8&hidden_sizes=8,16&depths=1,1&image_size=40&num_channels=1",
         "ResNetForImageClassification", (1, 40, 40)),
        ("hf:pvt_v2?image_size=32,48&hidden_sizes=8,16,32,64&num_attention_heads=1,1,1,1"
         "&depths=1,1,1,1", "PvtV2ForImageClassification", (3, 32, 48)),  # not square
    ],
)  # fmt: skip
def test_other_image_classifiers_build_tiny(name: str, model_class: str, shape: tuple) -> None:
    import torch

    name += "&samples=10"
    assert user.describe(name)["description"].startswith(f"{model_class}, ")
    workload = user.load(name)
    model = workload.torch(torch.device("cpu"))[0]
    assert type(model).__name__ == model_class
    x = workload.data(0)[0]
    assert x.shape[1:] == shape
    assert tuple(model(torch.from_numpy(x[:2])).logits.shape) == (2, 10)  # 10 classes unless told


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (VIT + "&seq_len=16", "seq_len is not a query key: an image model's input is the "
         "config's image_size"),
        (VIT + "&labels=3", "num_labels and labels are the same key: give one"),
        (VIT + "&task=causal-lm", "vit has no causal-lm model in transformers: hf: trains it as "
         "task=image-classification, the default"),
        ("hf:gpt2?task=image-classification", "gpt2 has no image-classification model in "
         "transformers"),
        ("hf:imagegpt", "ImageGPTForImageClassification takes input_ids, not pixel_values"),
        ("hf:vit?pach_size=8", "the vit config (ViTConfig) has no 'pach_size' (did you mean "
         "patch_size, image_size, hidden_size?); mpbench's own keys: task, num_labels (or "
         "labels), samples, lr, attn_implementation, image_size (where the config has none)"),
        ("hf:vit?image_size=0", "image_size must be a positive integer, not 0"),
        ("hf:resnet?image_size=0", "image_size must be an integer >= 1, not 0"),
        # The meta forward finds what the model cannot take: a patch larger than the image.
        ("hf:vit?image_size=32&patch_size=64&hidden_size=32&num_hidden_layers=1"
         "&num_attention_heads=2&intermediate_size=64", "transformers' ViTForImageClassification "
         "cannot train on 3-channel 32x32 images: RuntimeError"),
    ],
)  # fmt: skip
def test_a_bad_image_classifier_name_is_one_line(name: str, said: str) -> None:
    assert said in one_line(name, user.describe)


def test_a_tiny_vit_trains_in_fp32_and_bf16_with_its_flops(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_mpbench("run", "-w", VIT, "-f", "torch", "-p", "fp32", "-p", "bf16",
                         "--max-steps", "3", *TINY, "--out", out, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    fp32, bf16 = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert fp32["status"] == bf16["status"] == "ok"
    assert fp32["params"] == vit_params()
    assert fp32["config"]["data_layout"] == "NCHW (as given)"
    assert fp32["flops_per_step"] == bf16["flops_per_step"] == vit_training_flops(32)
    assert fp32["config"]["workload_source"]["task"] == "image-classification"
    assert "chosen_for_policy" not in bf16["config"]  # no experts to choose for
    precision = bf16["precision"]
    assert precision["convolution_dtype"] == "bfloat16"
    assert precision["matmul_share_low_precision"] == 1.0


def test_a_convnexts_accuracy_rises_from_chance(tmp_path: Path) -> None:
    out = tmp_path / "run"
    name = CONVNEXT + "&num_labels=4&samples=256"
    result = run_mpbench("run", "-w", name, "-f", "torch", "-p", "fp32", "--max-steps", "8",
                         *TINY, "--out", out, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok"
    assert record["accuracy"]["test_accuracy"] >= 0.6  # 4 classes: chance is 0.25


def test_a_bad_image_classifier_is_refused_before_anything_runs(tmp_path: Path) -> None:
    name = VIT.replace("patch_size=8", "patch_size=64")
    result = run_mpbench("run", "-w", name, "-f", "torch", "--out", tmp_path / "o")
    line = refusal_line(result, tmp_path / "o")
    assert "cannot train on 3-channel 32x32 images" in line
