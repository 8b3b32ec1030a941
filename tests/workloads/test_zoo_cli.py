"""A model zoo by name through the real command: tiny Hugging Face and Keras models trained
end to end in cell processes, bad names refused in one line with exit 2, no network touched.

torchvision and timm: the registry's torchvision cannot import beside the CPU torch of this
machine (`operator torchvision::nms does not exist`), so their builders are tested with small
stand-in packages of those names on PYTHONPATH (their factories return real torch modules),
and the import failure with a stand-in that raises as the real one does."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli import run_mpbench
from frameworks import installed, needs_tensorflow, needs_torch
from refusals import refusal_line

needs_transformers = pytest.mark.skipif(
    not (installed("transformers") and installed("torch")), reason="needs transformers and torch"
)
TINY = ("--max-steps", "3", "--warmup-steps", "1", "--repeat", "1", "--device", "cpu",
        "--threads", "1")  # fmt: skip
GPT2 = "hf:gpt2?n_layer=1&n_embd=32&n_head=2&vocab_size=128&n_positions=64&seq_len=16&samples=64"


def run_records(out: Path, *args: str, env: dict[str, str] | None = None) -> list[dict]:
    result = run_mpbench("run", *TINY, "--out", out, *args, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def refused(tmp_path: Path, name: str, env: dict[str, str] | None = None) -> str:
    """The one line `mpbench run -w NAME` exits 2 with, before anything runs."""
    result = run_mpbench("run", "-w", name, "-f", "all", "--out", tmp_path / "o", env=env)
    return refusal_line(result, tmp_path / "o")


# --- end to end ----------------------------------------------------------------------------


@needs_transformers
def test_a_tiny_gpt2_by_name_trains_and_its_record_keeps_the_config(tmp_path: Path) -> None:
    # Its settings from its own TOML table, `[workloads."hf:..."]`: that was refused
    # (`unknown workload`) although the same name ran from `workloads = [...]`.
    config = tmp_path / "zoo.toml"
    config.write_text(f'[workloads."{GPT2}"]\nbatch_size = 4\n')
    (record,) = run_records(tmp_path / "run", "--config", config, "-w", GPT2, "-f", "torch",
                            "-p", "fp32")  # fmt: skip
    assert record["status"] == "ok", record
    assert record["workload"] == GPT2
    assert (record["config"]["batch_size"], record["config"]["units"]) == (4, None)
    assert record["params"] == 18_912
    assert record["flops_per_step"] > 0
    assert record["accuracy"]["test_accuracy"] is not None  # per token: targets are class ids
    source = record["config"]["workload_source"]
    assert (source["zoo"], source["model_type"], source["task"]) == ("hf", "gpt2", "causal-lm")
    assert (source["config"]["n_layer"], source["config"]["n_embd"]) == (1, 32)
    assert record["data"]["source"] == "user" and record["data"]["train_size"] == 64


@needs_tensorflow
def test_a_keras_application_by_name_trains(tmp_path: Path) -> None:
    # MobileNet (v1) at its least input and width: a real application resolved by name and
    # trained, with 92 layers to build and trace against MobileNetV2's 157 (half the time here).
    name = "keras:MobileNet?size=32&samples=40&alpha=0.25"
    (record,) = run_records(tmp_path / "run", "-w", name, "-f", "tensorflow", "-p", "fp32",
                            "--batch-size", "8")  # fmt: skip
    assert record["status"] == "ok", record
    source = record["config"]["workload_source"]
    assert source["application"] == "MobileNet"
    assert source["arguments"] == {
        "weights": None,
        "input_shape": [32, 32, 3],
        "classes": 10,
        "classifier_activation": None,
        "alpha": 0.25,
    }
    assert record["params"] > 0


# --- bad names -----------------------------------------------------------------------------


@needs_transformers
def test_a_bad_hugging_face_name_is_one_line_and_exit_2(tmp_path: Path) -> None:
    line = refused(tmp_path, "hf:gpt2?n_layerz=2")
    assert "the gpt2 config (GPT2Config) has no 'n_layerz' (did you mean n_layer?)" in line


@needs_transformers
def test_a_causal_lm_that_would_see_its_targets_is_refused_before_anything_runs(tmp_path):
    name = (
        "hf:bert?num_hidden_layers=1&hidden_size=32&num_attention_heads=2&intermediate_size=64"
        "&vocab_size=300&seq_len=16&samples=20&task=causal-lm&is_decoder=false"
    )
    line = refused(tmp_path, name)
    assert "task=causal-lm needs is_decoder=true for bert, not is_decoder=false" in line


@needs_tensorflow
def test_an_unknown_keras_application_lists_the_valid_ones(tmp_path: Path) -> None:
    line = refused(tmp_path, "keras:MobileNetV3")
    assert "unknown keras application 'MobileNetV3' (did you mean MobileNetV2" in line
    assert "valid choices: ConvNeXtBase" in line and "Xception" in line


CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
TORCH = importlib.metadata.version("torch") if installed("torch") else ""
CPU_TORCH = TORCH.endswith("+cpu")


@pytest.mark.skipif(installed("torchvision"), reason="about a machine without torchvision")
def test_a_missing_torchvision_names_the_matching_build_first(tmp_path: Path) -> None:
    line = refused(tmp_path, "torchvision:resnet50")
    assert "torchvision is not installed: pip install " in line
    if installed("torch"):
        assert "'torchvision==0." in line
    if CPU_TORCH:  # the extra's default-index wheel links CUDA: the CPU index comes first
        wanted = f"'torchvision==0.{int(TORCH.split('.')[1]) + 15}.*'"
        assert f"torchvision is not installed: pip install {wanted} {CPU_INDEX}" in line
        assert line.index(CPU_INDEX) < line.index("mpbench[vision]")


@pytest.mark.skipif(installed("timm"), reason="about a machine without timm")
def test_a_missing_timm_names_the_torchvision_it_needs_first(tmp_path: Path) -> None:
    line = refused(tmp_path, "timm:x")
    if installed("torchvision"):
        assert line.endswith("timm is not installed: pip install timm")
        return
    assert "timm is not installed: pip install " in line
    assert line.endswith(", then pip install timm (timm imports torchvision)")
    if CPU_TORCH:
        assert CPU_INDEX in line


def test_a_torchvision_that_cannot_import_is_one_line_with_the_fix(tmp_path: Path) -> None:
    """As the registry's torchvision does beside a CPU torch: RuntimeError at import."""
    broken = tmp_path / "broken" / "torchvision"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n"
    )
    line = refused(tmp_path, "torchvision:resnet50", env={"PYTHONPATH": str(broken.parent)})
    assert (
        "importing torchvision failed (RuntimeError: operator torchvision::nms does not exist); "
        "install the torchvision built for torch"
    ) in line


@needs_transformers
def test_a_zoo_model_too_big_for_the_memory_is_refused_with_the_estimate(tmp_path: Path) -> None:
    """55 billion parameters: the probe counts them on the meta device (no memory), and the
    run stops there instead of a cell allocating until the machine runs out."""
    out = tmp_path / "o"
    # One short cell at most, should the refusal ever go: not a matrix allocating 818 GiB.
    name = "hf:gpt2?n_layer=1&n_embd=65536&n_head=64"
    done = run_mpbench("run", "-w", name, *TINY, "-f", "torch", "-p", "fp32", "--timeout", "60",
                       "--out", out, timeout=180)  # fmt: skip
    line = refusal_line(done, out)
    assert (
        "training it holds at least 818.1 GiB (54,901,342,208 parameters × 16 bytes: each "
        "float32 weight, its gradient and AdamW's 2 states; activations come on top), more "
        "than the "
    ) in line
    assert line.endswith("has available; make the model smaller")


@needs_transformers
def test_frameworks_no_workload_has_a_version_in_are_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    """It used to exit 0 with one skipped record, `its keras builder is None`."""
    out = tmp_path / "o"
    done = run_mpbench("run", "-w", GPT2, "-f", "tensorflow", "--out", out)
    assert refusal_line(done, out) == (
        "mpbench: error: -f tensorflow: hf:gpt2 has no TensorFlow version: it trains in torch "
        "only, so no cell of this run can train; use -f torch"
    )


@needs_transformers
def test_units_a_zoo_model_ignores_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "o"
    done = run_mpbench("run", "-w", GPT2, "-f", "torch", "--units", "999", "--out", out)
    assert refusal_line(done, out).endswith(
        "has no width for it to set (a zoo model's sizes and samples are keys of its name: "
        "hf:gpt2?KEY=N); --units sets mnist_dense, transformer_lm, transformer_lm_large only"
    )


# --- torchvision and timm, with stand-ins --------------------------------------------------

STAND_INS = {
    "torchvision/__init__.py": "from torchvision import models\n__version__ = '0.0+stand-in'\n",
    "torchvision/models.py": """
        import torch

        def list_models(module=None):
            return ["tinynet"]

        def get_model(name, weights=None, num_classes=1000, width=4):
            assert weights is None
            return torch.nn.Sequential(
                torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                torch.nn.Linear(width, num_classes),
            )
    """,
    "timm/__init__.py": """
        import torch
        __version__ = '0.0+stand-in'

        def list_models():
            return ["tiny_vit"]

        def create_model(name, pretrained=False, num_classes=1000, img_size=224):
            assert not pretrained
            return torch.nn.Sequential(
                torch.nn.Flatten(), torch.nn.Linear(3 * img_size * img_size, num_classes)
            )
    """,
}
# (3·3·3·4 + 4) + (4·10 + 10) with width 4; 8 with width=8
TINYNET_PARAMS = {4: 112 + 50, 8: 224 + 90}


def write_stand_ins(folder: Path) -> dict[str, str]:
    root = folder / "stand_ins"
    for path, text in STAND_INS.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text))
    return {"PYTHONPATH": str(root)}


@pytest.fixture
def stand_ins(tmp_path: Path) -> dict[str, str]:
    return write_stand_ins(tmp_path)


CHECK = """
import json, sys, torch
from mpbench.workloads import user
torch.manual_seed(0)
found = {}
for name in sys.argv[1:]:
    workload = user.load(name)
    x, y, x_test, y_test = workload.data(0)
    model, optimizer, loss = workload.torch(torch.device("cpu"))
    out = model(torch.from_numpy(x[:4]))
    found[name] = {
        "layout": workload.layout, "frameworks": workload.frameworks,
        "shapes": [list(a.shape) for a in (x, y, x_test, y_test)],
        "dtypes": [str(a.dtype) for a in (x, y)], "range": [float(x.min()), float(x.max())],
        "params": sum(p.numel() for p in model.parameters()), "out": list(out.shape),
        "loss": float(loss(out.float(), torch.from_numpy(y[:4]))),
        "optimizer": type(optimizer).__name__,
        "described": user.describe(name)["description"], "source": user.source(name),
    }
print(json.dumps(found))
"""


@needs_torch
def test_torchvision_and_timm_builders_make_what_their_factories_return(
    stand_ins: dict[str, str],
) -> None:
    names = ["torchvision:tinynet?samples=20&size=8&width=8", "timm:tiny_vit?img_size=8&size=8"]
    ran = subprocess.run(
        [sys.executable, "-c", CHECK, *names],
        capture_output=True,
        text=True,
        env={**os.environ, **stand_ins},
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    tv, timm = (json.loads(ran.stdout.splitlines()[-1])[n] for n in names)
    assert tv["layout"] == "NCHW" and tv["frameworks"] == ["torch"]
    assert tv["shapes"] == [[20, 3, 8, 8], [20], [4, 3, 8, 8], [4]]
    assert tv["dtypes"] == ["float32", "int64"] and 0 <= tv["range"][0] < tv["range"][1] <= 1
    assert tv["params"] == TINYNET_PARAMS[8] and tv["out"] == [4, 10]
    assert tv["described"].startswith(f"torchvision tinynet, {TINYNET_PARAMS[8]:,} parameters")
    assert tv["optimizer"] == "Adam" and tv["loss"] > 0
    assert tv["source"]["arguments"] == {"weights": None, "num_classes": 10, "width": 8}
    assert tv["source"]["version"] == "0.0+stand-in"
    assert timm["params"] == 3 * 8 * 8 * 10 + 10
    assert timm["source"]["arguments"] == {"pretrained": False, "num_classes": 10, "img_size": 8}


BAD_VISION_NAMES = [
    ("torchvision:resnet50", "unknown torchvision classifier 'resnet50'; e.g. tinynet"),
    ("torchvision:tinynet?weights=DEFAULT", "weights is not a query key: random weights"),
    ("torchvision:tinynet?depth=3", "torchvision tinynet refused it (TypeError:"),
    ("timm:tiny_vit?size=32", "timm tiny_vit refused it (RuntimeError:"),  # img_size 224
    ("timm:hf-hub:org/model", "random weights only: nothing is downloaded"),
]
# `mpbench run -w NAME` for each bad name, as run_mpbench runs it (a fork of a process that
# imported mpbench's CLI), from one interpreter started with the stand-ins on PYTHONPATH,
# each run's workload probe (user.probe) a new interpreter of its own, as ever.
REFUSE_ALL = """
import json, sys
sys.path.insert(0, sys.argv[1])
from cli import run_mpbench
found = {}
for index, name in enumerate(json.loads(sys.argv[3])):
    done = run_mpbench("run", "-w", name, "-f", "all", "--out", f"{sys.argv[2]}/o{index}")
    found[name] = [done.returncode, done.stdout, done.stderr]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def bad_vision_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, list], Path]:
    """Each of BAD_VISION_NAMES' runs, (returncode, stdout, stderr) by name; their folder."""
    root = tmp_path_factory.mktemp("bad_vision")
    env = {**os.environ, **write_stand_ins(root)}
    names = [name for name, _ in BAD_VISION_NAMES]
    ran = subprocess.run(
        [sys.executable, "-c", REFUSE_ALL, str(Path(__file__).parents[1]), root, json.dumps(names)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout.splitlines()[-1]), root


@needs_torch
@pytest.mark.parametrize(("name", "said"), BAD_VISION_NAMES)
def test_a_bad_vision_name_is_one_line_and_exit_2(
    bad_vision_runs: tuple[dict[str, list], Path], name: str, said: str
) -> None:
    found, root = bad_vision_runs
    code, stdout, stderr = found[name]
    done = subprocess.CompletedProcess(["mpbench", "run", "-w", name], code, stdout, stderr)
    out = root / f"o{[n for n, _ in BAD_VISION_NAMES].index(name)}"
    assert said in refusal_line(done, out)


@needs_torch
def test_a_torchvision_model_by_name_trains(tmp_path: Path, stand_ins: dict[str, str]) -> None:
    name = "torchvision:tinynet?samples=40&size=16"
    (record,) = run_records(tmp_path / "run", "-w", name, "-f", "torch", "-p", "fp32",
                            "--batch-size", "8", env=stand_ins)  # fmt: skip
    assert record["status"] == "ok", record
    assert record["params"] == TINYNET_PARAMS[4]
    assert record["config"]["workload_source"]["model"] == "tinynet"


# --- no network ----------------------------------------------------------------------------

NO_NETWORK = """
import json, socket, sys
tried = []
def refuse(*args, **kwargs):
    tried.append(repr(args[1:] or args))
    raise OSError("network is off in this test")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
import torch
from mpbench.workloads import user
name = sys.argv[1]
user.describe(name)
workload = user.load(name)
workload.torch(torch.device("cpu"))
workload.data(0)
print(json.dumps(tried))
"""


@needs_transformers
def test_a_hugging_face_model_is_built_without_touching_the_network() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_HUB_OFFLINE")}
    ran = subprocess.run(
        [sys.executable, "-c", NO_NETWORK, GPT2], capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1]) == []
