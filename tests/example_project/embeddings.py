"""A small local embedding: words hashed into 64 buckets (no model, no network)."""

import hashlib
import math


def _vector(text: str) -> list[float]:
    buckets = [0.0] * 64
    for word in text.lower().split():
        buckets[hashlib.sha256(word.encode()).digest()[0] % 64] += 1.0
    norm = math.sqrt(sum(v * v for v in buckets)) or 1.0
    return [v / norm for v in buckets]


def embed(texts: list[str]) -> list[list[float]]:
    return [_vector(text) for text in texts]
