"""Synthetic data for the zoo's models: learnable, so that test accuracy separates a working
precision policy from a broken one, and seeded, so that `data(seed)` is the same data for the
same seed in every framework and every cell.

The *task* (the Markov chain, the class templates, the label rule) is fixed by constants; the
seed picks only the samples drawn from it, as a real dataset's split would.
"""

from __future__ import annotations

import numpy as np

CHAIN_SEED = 0x5EED  # the Markov chain's transitions: one language for every seed
REFERENCE_SEED = 0xC0DE  # the sample the class thresholds are cut from
TEMPLATE_SEED = 0x1A6E  # the image classes' patterns
SUCCESSORS = (0.7, 0.1, 0.1, 0.1)  # each token's next-token probabilities (4 successors)
WEIGHT_SEED = 0xB0A7  # each token id's weight in a sequence's class score


def markov_tokens(samples: int, length: int, ids: np.ndarray, seed: int) -> np.ndarray:
    """`samples` sequences of `length` token ids, drawn from a fixed order-1 Markov chain over
    `ids`: each id has 4 successors, the first taken 70 % of the time, so a model that learns
    the chain predicts the next token far better than chance (int64, shape (samples, length))."""
    states = len(ids)
    successors = np.random.default_rng(CHAIN_SEED).integers(0, states, (states, len(SUCCESSORS)))
    rng = np.random.default_rng(seed)
    drawn = np.empty((samples, length), dtype=np.int64)
    drawn[:, 0] = rng.integers(0, states, samples)
    choices = rng.choice(len(SUCCESSORS), size=(samples, max(0, length - 1)), p=SUCCESSORS)
    for t in range(1, length):
        drawn[:, t] = successors[drawn[:, t - 1], choices[:, t - 1]]
    return ids[drawn]


def score_thresholds(length: int, ids: np.ndarray, classes: int) -> np.ndarray:
    """Where `score_labels` cuts the sequences' scores into `classes` classes: the quantiles
    of a fixed reference sample, so that the classes are about balanced and the same for
    every seed."""
    reference = markov_tokens(512, length, ids, REFERENCE_SEED)
    return np.quantile(_scores(reference, ids), np.arange(1, classes) / classes)


def score_labels(tokens: np.ndarray, ids: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """A sequence's class, a function of its tokens alone: the sum of a fixed weight per token
    id (a bag of words, which a classifier's pooling can learn), cut at `thresholds`."""
    return np.searchsorted(thresholds, _scores(tokens, ids), side="right").astype(np.int64)


def _scores(tokens: np.ndarray, ids: np.ndarray) -> np.ndarray:
    weights = np.random.default_rng(WEIGHT_SEED).standard_normal(len(ids))
    return weights[np.searchsorted(ids, tokens)].sum(axis=1)


# What a record says of `images` (its `config.workload_source.data`).
IMAGES = "synthetic images: a fixed coarse pattern per class under noise, in [0, 1]"


def images(
    samples: int,
    size: int | tuple[int, int],
    classes: int,
    seed: int,
    layout: str,
    channels: int = 3,
) -> tuple:
    """(x, y): float32 images in [0, 1] of `size` (an int: square; or (height, width)) with
    `channels` channels in `layout` ("NHWC" or "NCHW"), each a fixed coarse pattern of its
    class (8×8 blocks scaled up, so pooling keeps it) under noise; int64 labels, about
    balanced. Square 3-channel images are the same for the same seed as they always were."""
    height, width = (size, size) if isinstance(size, int) else size
    coarse = np.random.default_rng(TEMPLATE_SEED).uniform(-0.3, 0.3, (classes, 8, 8, channels))
    # ceil: the pattern covers the image
    templates = coarse.astype(np.float32).repeat(-(-height // 8), axis=1)
    templates = templates.repeat(-(-width // 8), axis=2)
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, samples).astype(np.int64)
    # float32 throughout, in place: at 224×224 the set is hundreds of MB already.
    x = templates[:, :height, :width][y]
    noise = rng.standard_normal((samples, height, width, channels), dtype=np.float32)
    noise *= 0.2
    x += noise
    del noise
    x += 0.5
    np.clip(x, 0.0, 1.0, out=x)
    if layout == "NCHW":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x, y
