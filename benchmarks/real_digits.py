"""Real handwritten digits in MNIST's own file format, for a machine that cannot download MNIST.

    python benchmarks/real_digits.py OUT_DIR [--digits digits.csv.gz]
    mpbench run -w mnist_dense --data real --data-dir OUT_DIR ...

The source is the UCI "Optical Recognition of Handwritten Digits" set as scikit-learn ships it
(`sklearn/datasets/data/digits.csv.gz`: 1,797 digits of 8×8 pixels, 0–16, label last). Each
digit is scaled up 3× to 24×24, padded to MNIST's 28×28 and to its 0–255 range, and written as
the four IDX files MNIST comes in (train: the first 1,500; test: the other 297), which
mpbench's MNIST reader takes like the real thing. It is real data, so accuracy differences
between policies measure real training, unlike synthetic data's labels; it is not MNIST, so
its accuracies are not MNIST's.

`--digits` names the CSV; without it, an installed scikit-learn's copy is used.
"""

from __future__ import annotations

import argparse
import gzip
import struct
import sys
from pathlib import Path

import numpy as np

TRAIN = 1500  # of 1,797; the rest is the test split
SCALE, PAD = 3, 2  # 8 × 3 + 2 × 2 = 28


def digits_csv() -> Path:
    try:
        import sklearn
    except ImportError:
        raise SystemExit("no --digits given and scikit-learn is not installed") from None
    return Path(sklearn.__file__).parent / "datasets" / "data" / "digits.csv.gz"


def load(path: Path) -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(path, delimiter=",", dtype=np.int64)
    pixels, labels = table[:, :-1].reshape(-1, 8, 8), table[:, -1]
    big = np.kron(pixels, np.ones((SCALE, SCALE), dtype=np.int64))
    images = np.pad(big, ((0, 0), (PAD, PAD), (PAD, PAD)))
    return (images * 255 // 16).astype(np.uint8), labels.astype(np.uint8)


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file (gzip): magic 0x0000 0x08 (unsigned byte) and the rank, then the sizes."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as out:
        out.write(header + array.tobytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--digits", type=Path, default=None)
    args = parser.parse_args(argv)
    images, labels = load(args.digits or digits_csv())
    args.out.mkdir(parents=True, exist_ok=True)
    splits = {
        "train": (images[:TRAIN], labels[:TRAIN]),
        "t10k": (images[TRAIN:], labels[TRAIN:]),
    }
    for name, (x, y) in splits.items():
        write_idx(args.out / f"{name}-images-idx3-ubyte.gz", x)
        write_idx(args.out / f"{name}-labels-idx1-ubyte.gz", y)
    print(f"{len(images)} digits: {TRAIN} train, {len(images) - TRAIN} test, in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
