"""A model of several inputs in torch cells run in this process (keyword_models.py): every
batch takes the same rows of each input, however it is gathered; and a raw T5's float8 plan
traced from a dict x, each layer's GEMM M from what it really sees (the encoder's and the
cross-attention's keys batch × 16 source tokens, the decoder's batch × 8 target tokens)."""

from __future__ import annotations

import keyword_models
import pytest
from builders import cell_spec

torch = pytest.importorskip("torch")

from mpbench.backends.torch import backend  # noqa: E402
from mpbench.backends.torch.inputs import call  # noqa: E402

TINY = dict(
    batch_size=keyword_models.BATCH, max_steps=3, warmup_steps=1, epochs=1, intra_op_threads=1,
    units=None, fp8_eager=True,
)  # fmt: skip


@pytest.mark.parametrize("contiguous", [True, False], ids=["buffers", "indexed"])
def test_every_batch_takes_the_same_rows_of_each_input(contiguous: bool) -> None:
    ids = torch.arange(32)
    feature = (10.0 * ids)[:, None].repeat(1, 3)
    if not contiguous:  # a strided input is gathered by indexing, not into buffers
        feature = (10.0 * ids)[:, None].repeat(1, 6)[:, ::2]
    x = {"ids": ids, "feature": feature}
    generator = torch.Generator().manual_seed(0)
    batches = backend._Batches(x, ids.clone(), 8, 2, generator, accumulate=2)  # 2 steps of 2 × 8
    seen = []
    for _ in range(2):  # two epochs: reshuffled, the buffers reused
        for step in batches.epoch():
            for xb, yb in step:
                assert torch.equal(xb["ids"], yb)
                assert torch.equal(xb["feature"], (10.0 * yb)[:, None].repeat(1, 3))
                seen.append(yb.clone())
    assert len(seen) == 2 * 2 * 2
    assert sorted(torch.cat(seen[:4]).tolist()) == list(range(32))  # each sample once an epoch
    assert bool(batches.buffers) is contiguous


def test_call_gives_a_dict_as_keyword_arguments() -> None:
    def model(input_ids=None, decoder_input_ids=None):
        return input_ids, decoder_input_ids

    assert call(model, {"decoder_input_ids": 2, "input_ids": 1}) == (1, 2)
    assert call(lambda x: x + 1, torch.ones(1)).item() == 2


def test_a_t5s_fp8_gemms_see_the_source_and_the_target() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("torchao")
    spec = cell_spec(workload="keyword_models:T5", policy="float8", **TINY)
    result = backend.run_cell(spec, lambda step, total: None, lambda message: None)
    assert result.status == "ok"
    expected = 3 * keyword_models.t5_forward_flops(keyword_models.BATCH)
    assert result.extra_config["flops_per_micro_batch"] == expected
    rows = {r["layer"]: r["m"] for r in result.fp8["prediction"]["rows"] if r["role"] == "forward"}
    source = keyword_models.BATCH * keyword_models.SOURCE_TOKENS
    target = keyword_models.BATCH * keyword_models.TARGET_TOKENS
    assert rows["encoder.block.0.layer.0.SelfAttention.q"] == source
    assert rows["encoder.block.1.layer.1.DenseReluDense.wo"] == source
    assert rows["decoder.block.0.layer.0.SelfAttention.q"] == target
    assert rows["decoder.block.0.layer.1.EncDecAttention.q"] == target
    assert rows["decoder.block.0.layer.1.EncDecAttention.k"] == source  # the encoder's output
    assert rows["lm_head"] == target
