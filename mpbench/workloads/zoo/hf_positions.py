"""Whether an hf: text model takes `seq_len` tokens, found by a forward on the meta device
with the tokens' values known (meta_forward.py), in the probe, before any cell.

`seq_len <= max_position_embeddings` is the rule for most models, and hf.py checks it from
the configuration; it is not the rule for every model. RoBERTa and its kin (xlm-roberta,
camembert, mpnet, esm, ...) count positions from `pad_token_id + 1`, so 32 tokens need 34
rows of roberta's position table: `seq_len = max_position_embeddings` passed that check and
every cell failed with `index out of range`. What the model itself looks up is the rule
here, whatever its family, with the longest seq_len it takes named.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mpbench.workloads.zoo import ZooName
from mpbench.workloads.zoo.data import markov_tokens

SAMPLE_SEED = 0  # which tokens the forward reads: any of the data's do (specials are never used)


def check_seq_len(
    name: ZooName, model: Any, model_type: str, seq_len: int, ids: np.ndarray, config: Any
) -> None:
    """InvalidInput, one line naming the limit, where a forward of `model` (built on the
    meta device) on `seq_len` tokens reads past a table; nothing where it does not, or where
    meta cannot run it (then a cell is the judge)."""
    found = _lookup(model, seq_len, ids)
    if found is None:
        return
    table = f"{found.place} ({found.op}) has {found.size} (0..{found.size - 1})"
    offset = found.index - (seq_len - 1)  # the first token's index, were indices positions
    longest = found.size - offset
    if offset < 0 or longest < 1 or _lookup(model, longest, ids) is not None:
        # Not a position table read from an offset that a shorter sequence confirms (a
        # longt5's relative-position buckets, computed from values meta cannot follow all
        # the way, read 46 of 32 at 16 tokens, and its real forward runs): no verdict, the
        # cells judge. Refused only what is confirmed.
        return
    raise name.invalid(
        f"seq_len {seq_len} is too long for this {model_type}: {_starts(offset, config)}, so "
        f"{seq_len} tokens read index {found.index} where {table}; seq_len "
        f"{longest} at most{_or_more(found.size, seq_len + offset, config)}"
    )


def _lookup(model: Any, seq_len: int, ids: np.ndarray) -> Any:
    import torch

    from mpbench.workloads.zoo.meta_forward import out_of_range

    tokens = torch.from_numpy(markov_tokens(2, seq_len, ids, SAMPLE_SEED))
    return out_of_range(model, input_ids=tokens)


def _starts(offset: int, config: Any) -> str:
    """Where its position ids start, and why where the configuration says (RoBERTa's)."""
    pad = getattr(config, "pad_token_id", None)
    if isinstance(pad, int) and not isinstance(pad, bool) and offset == pad + 1:
        return f"its position ids start at {offset} (pad_token_id {pad} + 1), not 0"
    return f"its position ids start at {offset}, not 0"


def _or_more(size: int, needed: int, config: Any) -> str:
    """How to make the table long enough, where it is the configuration's positions."""
    if getattr(config, "max_position_embeddings", None) == size:
        return f" with max_position_embeddings {size} (or max_position_embeddings={needed})"
    return ""
