"""RoBERTa's position limit (issue 56, item 4): `hf:roberta?max_position_embeddings=32&
seq_len=32` passed the up-front check and every cell failed with an index out of range, as
RoBERTa-like models count positions from pad_token_id + 1. The probe now runs one forward on
the meta device with the tokens' values known (zoo/meta_forward.py) and refuses, in one line
naming the longest seq_len, what would read past a table; meta_forward's own rules are
checked on small modules of known behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import run_mpbench
from frameworks import installed
from refusals import one_line, refusal_line

from mpbench.workloads import user

needs_transformers = pytest.mark.skipif(
    not (installed("transformers") and installed("torch")), reason="needs transformers and torch"
)
needs_torch = pytest.mark.skipif(not installed("torch"), reason="needs torch")
SMALL = (
    "num_hidden_layers=1&hidden_size=32&num_attention_heads=2&intermediate_size=64"
    "&vocab_size=300&max_position_embeddings=32&samples=20"
)


def roberta(seq_len: int, model_type: str = "roberta") -> str:
    return f"hf:{model_type}?{SMALL}&seq_len={seq_len}"


@needs_transformers
def test_roberta_at_its_position_limit_is_refused_with_the_limit() -> None:
    said = one_line(roberta(32), user.describe)
    assert said.endswith(
        "seq_len 32 is too long for this roberta: its position ids start at 2 (pad_token_id 1 + "
        "1), not 0, so 32 tokens read index 33 where roberta.embeddings (aten.gather) has 32 "
        "(0..31); seq_len 30 at most with max_position_embeddings 32 (or "
        "max_position_embeddings=34)"
    )


@needs_transformers
@pytest.mark.parametrize(
    ("name", "said"),
    [
        (roberta(31), "seq_len 30 at most with max_position_embeddings 32"),
        (roberta(31, "xlm-roberta"), "seq_len 30 at most"),
        # mpnet reads its position table by embedding (its weight named), not by gather.
        (roberta(32, "mpnet"), "32 tokens read index 33 where "
         "mpnet.embeddings.position_embeddings.weight (aten.embedding) has 32 (0..31); seq_len "
         "30 at most"),
        # A pad id of 5: positions from 6, so 26 at most.
        (roberta(32) + "&pad_token_id=5", "its position ids start at 6 (pad_token_id 5 + 1), not "
         "0, so 32 tokens read index 37 where roberta.embeddings (aten.gather) has 32 (0..31); "
         "seq_len 26 at most with max_position_embeddings 32 (or max_position_embeddings=38)"),
    ],
)  # fmt: skip
def test_a_roberta_like_model_past_its_positions_is_one_line(name: str, said: str) -> None:
    assert said in one_line(name, user.describe)


@needs_transformers
@pytest.mark.parametrize(
    "name",
    [
        roberta(30),  # the limit itself
        f"hf:bert?{SMALL}&seq_len=32",  # positions from 0: seq_len may be all of them
        "hf:gpt2?n_layer=1&n_embd=32&n_head=2&vocab_size=128&n_positions=16&seq_len=16",
        # A MoE meta cannot route (its grouped GEMM's meta kernel wants bfloat16): no verdict,
        # no refusal.
        "hf:mixtral?hidden_size=64&intermediate_size=128&num_hidden_layers=1"
        "&num_attention_heads=4&num_key_value_heads=2&num_local_experts=4&vocab_size=128"
        "&max_position_embeddings=16&seq_len=16",
        # Relative-position buckets meta cannot follow read past the table at first sight
        # (46 of 32); no shorter sequence confirms a position offset, and the model runs.
        "hf:longt5?d_model=32&num_heads=2&d_kv=16&d_ff=64&num_layers=1&vocab_size=128&seq_len=16",
    ],
)
def test_a_model_within_its_positions_passes(name: str) -> None:
    assert user.describe(name)["params"] > 0


@needs_transformers
def test_roberta_past_its_positions_is_refused_before_anything_runs(tmp_path: Path) -> None:
    result = run_mpbench("run", "-w", roberta(32), "-f", "torch", "--out", tmp_path / "o")
    line = refusal_line(result, tmp_path / "o")
    assert line.endswith("seq_len 30 at most with max_position_embeddings 32 (or "
                         "max_position_embeddings=34)")  # fmt: skip


# --- the meta forward's rules --------------------------------------------------------------


class Positions:
    """A module made in the test (torch imported there): positions counted from an offset,
    as RoBERTa counts them (a cumulative sum of the non-pad tokens, plus the pad id)."""

    @staticmethod
    def make(rows: int, pad: int = 1):
        import torch

        class Module(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.table = torch.nn.Embedding(rows, 4)

            def forward(self, input_ids):
                mask = input_ids.ne(pad).int()
                positions = torch.cumsum(mask, dim=1) * mask + pad
                return self.table(positions.long())

        with torch.device("meta"):
            return Module()


@needs_torch
def test_a_lookup_past_its_table_is_found_from_the_values_meta_cannot_hold() -> None:
    import torch

    from mpbench.workloads.zoo.meta_forward import OutOfRange, out_of_range

    model = Positions.make(rows=8)
    assert out_of_range(model, input_ids=torch.full((2, 6), 7)) is None  # positions 2..7
    found = out_of_range(model, input_ids=torch.full((2, 7), 7))  # positions 2..8
    assert found == OutOfRange("aten.embedding", "table.weight", 8, 8)


@needs_torch
def test_a_forward_meta_cannot_finish_has_no_verdict() -> None:
    """`.item()` of a weight (no value on meta) ends the forward: no verdict, where a refusal
    would be a guess."""
    import torch

    from mpbench.workloads.zoo.meta_forward import meta_forward, meta_only, out_of_range

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Embedding(4, 2)

        def forward(self, input_ids):
            scale = self.table.weight.abs().max().item()
            return self.table(input_ids + 10) * scale  # out of range, after the .item()

    with torch.device("meta"):
        model = Scaled()
    assert out_of_range(model, input_ids=torch.zeros(1, 3, dtype=torch.long)) is None
    with pytest.raises(RuntimeError) as raised:
        meta_forward(model, input_ids=torch.zeros(1, 3, dtype=torch.long))
    assert meta_only(raised.value)


@needs_torch
def test_a_value_changed_by_what_meta_cannot_know_is_no_longer_known() -> None:
    """Positions 0..9 of a table of 8, then multiplied in place by a weight's value (unknown on
    meta): what the lookup reads is unknown, and nothing is refused on the stale 0..9."""
    import torch

    from mpbench.workloads.zoo.meta_forward import out_of_range

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Embedding(8, 2)
            self.scale = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids):
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)
            positions.mul_(self.scale.long())  # all 0 on a real device: in range
            return self.table(positions)

    with torch.device("meta"):
        model = Scaled()
    assert out_of_range(model, input_ids=torch.zeros(1, 10, dtype=torch.long)) is None
