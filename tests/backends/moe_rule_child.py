"""Run as a script by test_moe_policy.py, in a process of its own: mpbench's autocast rule for
grouped GEMMs is registered for the whole process it runs in (as in a cell), so it must not
reach the test process. Prints one JSON object of what it found."""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from mpbench.policies import resolve
from mpbench.workloads.zoo import hf_experts

# The tiny Mixtral of test_moe_precision.py: 4 experts, top-2, 2 layers.
MIXTRAL = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
    "num_experts_per_tok": 2, "vocab_size": 128, "max_position_embeddings": 64,
}  # fmt: skip


def trained_once(model: Any, implementation: str, tokens: torch.Tensor) -> dict[str, Any]:
    """One forward and backward under bf16 autocast, as a training step runs them: the
    logits, one expert weight's gradient, the dtypes aten._grouped_mm ran in."""
    model = copy.deepcopy(model)
    model.set_experts_implementation(implementation)
    seen: set[str] = set()

    class Dtypes(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._grouped_mm.default:
                seen.add(str(args[0].dtype))
            return func(*args, **(kwargs or {}))

    with Dtypes(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens).logits
    logits.float().logsumexp(-1).mean().backward()
    grad = model.model.layers[0].mlp.experts.gate_up_proj.grad
    return {"logits": logits.float(), "grad": grad, "grouped_mm": sorted(seen)}


def choices(model: Any) -> dict[str, Any]:
    """What the hook chooses for each policy, with and without the user's key; and, where
    this device's grouped_mm could not run float16, what it falls back to."""
    found = {}
    for policy in ("float32", "tf32", "mixed_bfloat16", "float8"):
        found[policy] = hf_experts.for_policy(None)(copy.deepcopy(model), resolve(policy))
    given = copy.deepcopy(model)
    found["given"] = hf_experts.for_policy("grouped_mm")(given, resolve("mixed_bfloat16"))

    def no_float16(torch: Any, device_type: str, dtype: Any) -> None:
        raise RuntimeError("no float16 kernel")  # a GPU whose grouped_mm is bfloat16-only

    tried, hf_experts._try_grouped_mm = hf_experts._try_grouped_mm, no_float16
    fallback = copy.deepcopy(model)
    found["fp16_without_kernel"] = hf_experts.for_policy(None)(fallback, resolve("fp16"))
    found["fp16_built"] = fallback.config._experts_implementation
    hf_experts._try_grouped_mm = tried
    return found


def main() -> int:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("mixtral", **MIXTRAL))
    tokens = torch.randint(0, 128, (4, 16))
    eager = trained_once(model, "eager", tokens)
    without = trained_once(model, "grouped_mm", tokens)  # no rule yet: float32 experts
    chosen = choices(model)  # registers the bfloat16 rule, as a bf16 cell does
    ruled = trained_once(model, "grouped_mm", tokens)
    gpt2 = AutoModelForCausalLM.from_config(
        AutoConfig.for_model("gpt2", n_layer=1, n_embd=32, n_head=2, vocab_size=128)
    )
    out = {
        "without_rule": {
            "grouped_mm": without["grouped_mm"],
            "logits_vs_eager": (without["logits"] - eager["logits"]).abs().max().item(),
        },
        "with_rule": {
            "grouped_mm": ruled["grouped_mm"],
            "logits_vs_eager": (ruled["logits"] - eager["logits"]).abs().max().item(),
            "grad_vs_eager": (ruled["grad"] - eager["grad"]).abs().max().item(),
            "grad_scale": eager["grad"].abs().max().item(),
        },
        "choices": chosen,
        "no_experts": hf_experts.for_policy(None)(gpt2, resolve("mixed_bfloat16")),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
