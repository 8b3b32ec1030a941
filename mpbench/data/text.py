"""Byte-level text for the language-model workload: TinyShakespeare's `input.txt` in its
canonical form when found, else a seeded synthetic byte stream with learnable structure.

Every byte is a token (vocabulary 256, no tokenizer). The stream is split 90 / 10 into train
and test (nanoGPT's convention for this corpus) and each split cut into non-overlapping
windows of `seq_len + 1` bytes: a sample is the first `seq_len` bytes, its targets the same
window shifted by one. Nothing here is downloaded: no digest of the corpus is published to
check a download against, so mpbench reads a copy the user put in place and records the
SHA-256 of what it read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mpbench.data import synthetic
from mpbench.data.dataset import LoadedDataset
from mpbench.data.errors import DataError, DataNotFound, one_line
from mpbench.data.files import is_file, kind, read_file
from mpbench.data.locate import Found, places
from mpbench.data.locations import sha256_bytes
from mpbench.errors import InvalidInput, unknown_choice

TEXT_DATASETS = ("tinyshakespeare",)
LABELS = {"tinyshakespeare": "TinyShakespeare"}
FORMAT = "text"
# The names the corpus goes by: char-rnn's and nanoGPT's `input.txt`, the TensorFlow text
# generation tutorial's `shakespeare.txt` (keras.utils.get_file keeps it in the Keras
# cache), and the names scripts save it under.
FILE_NAMES = ("input.txt", "tinyshakespeare.txt", "tiny_shakespeare.txt", "shakespeare.txt")
FOLDERS = ("", "tinyshakespeare", "shakespeare_char")
# The canonical file (karpathy/char-rnn data/tinyshakespeare/input.txt): 1,115,394 bytes.
REAL_BYTES = 1_115_394
TRAIN_SHARE = 0.9
# A text file far larger than any corpus this workload reads is not one: refused unread.
MAX_TEXT_BYTES = 256 << 20


def find_text(dataset: str, data_dir: str | Path | None) -> Found | None:
    """The first copy of the corpus in look-up order (--data-dir, the mpbench cache, the
    Keras cache), by name; a --data-dir naming a `.txt` file is that file."""
    for place in places(data_dir):
        path = place.path
        if kind(path) == "file":
            if path.suffix == ".txt":
                return Found(dataset, FORMAT, path, place)
            continue
        for folder in FOLDERS:
            for name in FILE_NAMES:
                candidate = path / folder / name if folder else path / name
                if is_file(candidate):
                    return Found(dataset, FORMAT, candidate, place)
    return None


def read_corpus(path: Path) -> tuple[np.ndarray, str]:
    """The corpus as uint8 tokens and the SHA-256 of its bytes, or DataError: a text file
    is UTF-8 (TinyShakespeare is ASCII) without NUL bytes."""
    raw = read_file(path, MAX_TEXT_BYTES)
    if not raw:
        raise DataError(f"{path}: empty; a text corpus holds at least a few kilobytes of text")
    nul = raw.find(b"\0")
    if nul >= 0:
        raise DataError(f"{path}: a NUL byte at offset {nul}; not a text file")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    return np.frombuffer(raw, dtype=np.uint8), sha256_bytes(raw)


def windows(stream: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows: (N, seq_len) inputs and the (N, seq_len) next bytes."""
    count = (len(stream) - 1) // seq_len
    used = stream[: count * seq_len + 1]
    x = used[:-1].reshape(count, seq_len)
    y = used[1:].reshape(count, seq_len)
    return x, y


def split(stream: np.ndarray, seq_len: int, where: str) -> tuple[np.ndarray, ...]:
    """Train (the first 90 %) and test windows, or DataError when a split holds none."""
    cut = int(len(stream) * TRAIN_SHARE)
    x_train, y_train = windows(stream[:cut], seq_len)
    x_test, y_test = windows(stream[cut:], seq_len)
    if len(x_train) == 0 or len(x_test) == 0:
        need = int(np.ceil((seq_len + 1) / (1 - TRAIN_SHARE)))
        raise DataError(
            f"{where}: {len(stream)} bytes, too short for one test sequence of {seq_len} "
            f"bytes after the 90/10 split; it needs at least {need}"
        )
    return x_train, y_train, x_test, y_test


def read_text(found: Found, seq_len: int) -> LoadedDataset:
    """Read, validate and cut one located copy."""
    stream, digest = read_corpus(found.path)
    parts = split(stream, seq_len, str(found.path))
    return LoadedDataset(*parts, found.dataset, "real", str(found.path), {found.path.name: digest})


# --- the synthetic stream ----------------------------------------------------------------
# A fixed order-1 Markov chain over the 256 bytes: each byte has SUCCESSORS possible next
# bytes, with Dirichlet(1) probabilities. The chain is the same for every seed (the seed only
# draws the stream), so its entropy rate, the least loss any model can reach, is one
# documented number: `loss_floor()`. A model that learns gets well below the uniform
# log(256) = 5.545 nats within a hundred steps; a broken precision policy stays near it.
SUCCESSORS = 4
_CHAIN_SEED = 0x6D7062  # "mpb"
_TAG = 3  # the image stand-ins use 1 and 2
_CHAINS = 1024  # streams drawn side by side, then laid end to end


def _chain() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(_CHAIN_SEED)
    successors = np.stack([rng.choice(256, SUCCESSORS, replace=False) for _ in range(256)])
    probabilities = rng.dirichlet(np.ones(SUCCESSORS), size=256)
    return successors, probabilities


def _stationary(probabilities: np.ndarray, successors: np.ndarray) -> np.ndarray:
    matrix = np.zeros((256, 256))
    np.add.at(matrix, (np.arange(256)[:, None], successors), probabilities)
    state = np.full(256, 1 / 256)
    for _ in range(2000):
        state = state @ matrix
    return state / state.sum()


def loss_floor() -> float:
    """The chain's entropy rate in nats: the expected loss of the best possible model."""
    successors, probabilities = _chain()
    stationary = _stationary(probabilities, successors)
    entropy = -(probabilities * np.log(probabilities)).sum(axis=1)
    return float(stationary @ entropy)


def synthetic_stream(seed: int, length: int) -> np.ndarray:
    """`length` bytes of the chain, drawn with `seed`: _CHAINS walks side by side (one
    vectorised draw per position), laid end to end."""
    successors, probabilities = _chain()
    cumulative = np.cumsum(probabilities, axis=1)
    cumulative[:, -1] = 1.0
    rng = np.random.default_rng([_TAG, seed % (1 << 63)])
    steps = -(-length // _CHAINS)
    out = np.empty((_CHAINS, steps), dtype=np.uint8)
    state = rng.integers(0, 256, size=_CHAINS)
    for position in range(steps):
        out[:, position] = state
        pick = (rng.random(_CHAINS)[:, None] > cumulative[state]).sum(axis=1)
        state = successors[state, pick]
    return out.reshape(-1)[:length]


def synthetic_sizes(seq_len: int, train_size: int | None, test_size: int | None) -> tuple[int, int]:
    """(train, test) sequences of the stand-in: by default those the real corpus gives."""
    default_train = max((int(REAL_BYTES * TRAIN_SHARE) - 1) // seq_len, 1)
    default_test = max((REAL_BYTES - int(REAL_BYTES * TRAIN_SHARE) - 1) // seq_len, 1)
    return (
        synthetic.checked_size(train_size, default_train, "synthetic train size"),
        synthetic.checked_size(test_size, default_test, "synthetic test size"),
    )


def generate(dataset: str, seed: int, seq_len: int, train: int, test: int) -> LoadedDataset:
    """The stand-in, named "synthetic-<dataset>": `train` and `test` windows cut from one
    seeded stream, the test windows after the training ones."""
    stream = synthetic_stream(seed, (train + test) * seq_len + 1)
    x, y = windows(stream, seq_len)
    return LoadedDataset(
        x[:train], y[:train], x[train:], y[train:], f"synthetic-{dataset}", "synthetic"
    )


# --- deciding, as resolve.py does for the image datasets ------------------------------------


def resolve_text(
    dataset: str,
    mode: str,
    data_dir: str | Path | None,
    seq_len: int | None,
    synthetic_train_size: int | None,
    synthetic_test_size: int | None,
) -> tuple[Found | None, tuple[int, int], str | None]:
    """(the copy to read or None for the stand-in, the stand-in's sizes, the fall-back
    warning), or InvalidInput. Never downloads (module docstring)."""
    from mpbench.data.resolve import MODES

    if mode not in MODES:
        raise unknown_choice("data mode", mode, MODES)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise InvalidInput(f"{dataset}: a sequence length is needed, got {seq_len!r}")
    sizes = synthetic_sizes(seq_len, synthetic_train_size, synthetic_test_size)
    if mode == "synthetic":
        return None, sizes, None
    found = find_text(dataset, data_dir)
    if found is not None:
        return found, sizes, None
    searched = ", ".join(str(place.path) for place in places(data_dir))
    name = LABELS[dataset]
    names = " or ".join(FILE_NAMES[:2])
    if mode == "real":
        raise DataNotFound(
            f"no {name} corpus ({names}) found in {searched}; mpbench does not download it: "
            "put karpathy/char-rnn's data/tinyshakespeare/input.txt there or pass "
            "--data-dir, or use --data synthetic"
        )
    warning = (
        f"no {name} corpus ({names}) found in {searched}: using synthetic-{dataset}, a "
        f"seeded byte stream; its loss is not {name} loss"
    )
    return None, sizes, one_line(warning)


def load_text(
    dataset: str,
    mode: str,
    data_dir: str | Path | None,
    seed: int,
    seq_len: int | None,
    synthetic_train_size: int | None,
    synthetic_test_size: int | None,
) -> tuple[LoadedDataset, str | None]:
    """The dataset a cell trains on, and the warning of a fall-back to the stand-in."""
    found, (train, test), warning = resolve_text(
        dataset, mode, data_dir, seq_len, synthetic_train_size, synthetic_test_size
    )
    if found is not None:
        return read_text(found, seq_len), None
    return generate(dataset, seed, seq_len, train, test), warning
