"""A trained version's parameters, and their evaluation in plain Python (no numpy, no JVM).

Each kind mirrors how ``pyspark.ml`` scores a record, so that the edge's
predictions equal the hub's:

* :class:`Linear`: ``intercept + Σ coefficients[i] × x[i]``;
* :class:`Logistic`: the probability of label 1, ``1 / (1 + exp(-margin))``;
* :class:`Centroids`: the index of the nearest centre (squared Euclidean distance);
* :class:`Forest`: the trees' splits (a record goes left when ``x[feature] <= threshold``); a
  regression forest predicts the mean of its trees' leaves, a classifier the
  probability of label 1, the sum over trees of each leaf's class shares, normalised.

A model is decoded from JSON by :func:`decode_model`, which checks its sizes
(:data:`MAX_NUMBERS`) and shape, so a malformed or oversized model is refused
with the reason before it scores anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any

import msgspec

from spanedge.errors import SpanEdgeError
from spanedge.numbers import Finite

#: At most this many numbers in one model (about 16 MiB of JSON).
MAX_NUMBERS = 1_000_000

Numbers = Annotated[list[Finite], msgspec.Meta(max_length=MAX_NUMBERS)]
Ints = Annotated[list[int], msgspec.Meta(max_length=MAX_NUMBERS)]


class InvalidModel(SpanEdgeError, ValueError):
    """A model's parameters have the wrong shape or size; the message says which part."""


class Linear(msgspec.Struct, tag="linear", kw_only=True, frozen=True):
    """A linear regression."""

    coefficients: Numbers
    intercept: Finite

    def score(self, x: Sequence[float]) -> float:
        """The regression's value at ``x``."""
        return _margin(self.coefficients, self.intercept, x)


class Logistic(msgspec.Struct, tag="logistic", kw_only=True, frozen=True):
    """A binary logistic regression."""

    coefficients: Numbers
    intercept: Finite

    def score(self, x: Sequence[float]) -> float:
        """The probability of label 1 at ``x``."""
        margin = _margin(self.coefficients, self.intercept, x)
        return 1.0 / (1.0 + math.exp(-margin)) if margin > -700 else 0.0


class Centroids(msgspec.Struct, tag="kmeans", kw_only=True, frozen=True):
    """k-means cluster centres."""

    centres: Annotated[list[Numbers], msgspec.Meta(min_length=1, max_length=10_000)]

    def score(self, x: Sequence[float]) -> float:
        """The index of the centre nearest ``x`` (the first of equals)."""
        best, best_d = 0, math.inf
        for i, centre in enumerate(self.centres):
            d = 0.0
            for a, b in zip(centre, x, strict=True):
                d += (a - b) * (a - b)
            if d < best_d:
                best, best_d = i, d
        return float(best)


class Tree(msgspec.Struct, kw_only=True, frozen=True, array_like=True):
    """One decision tree, its nodes in arrays indexed by node number (node 0 is the root).

    An internal node has ``feature >= 0``, ``threshold`` and children
    ``left``/``right``; a leaf has ``feature == -1`` and its output in
    ``value``: the regression value, or the share of label 1 among its
    training rows for a classifier.
    """

    feature: Ints
    threshold: Numbers
    left: Ints
    right: Ints
    value: Numbers

    def leaf(self, x: Sequence[float]) -> float:
        """The value of the leaf ``x`` falls in."""
        node = 0
        feature, threshold, left, right = self.feature, self.threshold, self.left, self.right
        for _ in range(len(feature)):
            f = feature[node]
            if f < 0:
                return self.value[node]
            node = left[node] if x[f] <= threshold[node] else right[node]
        msg = "tree does not reach a leaf: its nodes form a cycle"
        raise InvalidModel(msg)


class Forest(msgspec.Struct, tag="forest", kw_only=True, frozen=True):
    """A random forest: the mean of its trees (regression) or the share of label 1 (classification)."""

    trees: Annotated[list[Tree], msgspec.Meta(min_length=1, max_length=10_000)]
    classifier: bool

    def score(self, x: Sequence[float]) -> float:
        """The forest's regression value, or probability of label 1, at ``x``."""
        total = 0.0
        for tree in self.trees:
            total += tree.leaf(x)
        return total / len(self.trees)


Model = Linear | Logistic | Centroids | Forest
"""The parameters of one trained version."""


def _margin(coefficients: Sequence[float], intercept: float, x: Sequence[float]) -> float:
    dot = 0.0
    for c, v in zip(coefficients, x, strict=True):
        dot += c * v
    return dot + intercept


def check_model(model: Model, n_features: int) -> Model:
    """Check that ``model`` scores ``n_features`` features and its trees are well-formed.

    Raises:
        InvalidModel: which part is wrong, and how.
    """
    if isinstance(model, Linear | Logistic):
        if len(model.coefficients) != n_features:
            msg = f"has {len(model.coefficients)} coefficients for {n_features} features"
            raise InvalidModel(msg)
    elif isinstance(model, Centroids):
        bad = next((i for i, c in enumerate(model.centres) if len(c) != n_features), None)
        if bad is not None:
            msg = f"centre {bad} has {len(model.centres[bad])} coordinates for {n_features} features"
            raise InvalidModel(msg)
    else:
        total = 0
        for i, tree in enumerate(model.trees):
            _check_tree(i, tree, n_features)
            total += len(tree.feature)
        if total > MAX_NUMBERS:
            msg = f"has {total} tree nodes; at most {MAX_NUMBERS} are allowed"
            raise InvalidModel(msg)
    return model


def _check_tree(index: int, tree: Tree, n_features: int) -> None:
    n = len(tree.feature)
    if n == 0 or not all(len(a) == n for a in (tree.threshold, tree.left, tree.right, tree.value)):
        msg = f"tree {index}: its node arrays are empty or of different lengths"
        raise InvalidModel(msg)
    for node in range(n):
        f = tree.feature[node]
        if f == -1:
            continue
        if not 0 <= f < n_features:
            msg = f"tree {index} node {node}: feature {f} is not one of the {n_features} features"
            raise InvalidModel(msg)
        # children come after their parent, so every path ends at a leaf
        if not (node < tree.left[node] < n and node < tree.right[node] < n):
            msg = f"tree {index} node {node}: children {tree.left[node]}, {tree.right[node]} are not later nodes"
            raise InvalidModel(msg)


_DECODER: msgspec.json.Decoder[Model] = msgspec.json.Decoder(Model)


def decode_model(data: bytes | str, n_features: int) -> Model:
    """Decode a model's JSON (:func:`encode_model`) and :func:`check_model` it.

    Raises:
        InvalidModel: not a model, or a malformed one; the message says where.
    """
    try:
        model = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidModel(str(exc)) from None
    except msgspec.DecodeError as exc:
        msg = f"is not JSON: {exc}"
        raise InvalidModel(msg) from None
    return check_model(model, n_features)


def model_builtins(model: Model) -> Any:
    """The model as JSON-ready builtins (with its ``type`` tag)."""
    return msgspec.to_builtins(model)


def model_from_builtins(data: Any, n_features: int) -> Model:
    """The model from :func:`model_builtins` output, checked.

    Raises:
        InvalidModel: not a model, or a malformed one.
    """
    try:
        model: Model = msgspec.convert(data, Model)
    except msgspec.ValidationError as exc:
        raise InvalidModel(str(exc)) from None
    return check_model(model, n_features)


def encode_model(model: Model) -> bytes:
    """The model as JSON."""
    return msgspec.json.encode(model)
