"""From fitted ``pyspark.ml`` models to the portable parameters a gateway evaluates (:mod:`spanedge.models.portable`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from spanedge.models.portable import Centroids, Forest, Linear, Logistic, Model, Tree


def export_linear(fitted: Any) -> Linear:
    """A ``LinearRegressionModel``'s coefficients and intercept."""
    return Linear(coefficients=[float(c) for c in fitted.coefficients.toArray()], intercept=float(fitted.intercept))


def export_logistic(fitted: Any) -> Logistic:
    """A binomial ``LogisticRegressionModel``'s coefficients and intercept."""
    return Logistic(coefficients=[float(c) for c in fitted.coefficients.toArray()], intercept=float(fitted.intercept))


def export_kmeans(fitted: Any) -> Centroids:
    """A ``KMeansModel``'s cluster centres."""
    return Centroids(centres=[[float(v) for v in centre] for centre in fitted.clusterCenters()])


def export_forest(spark: Any, fitted: Any, classifier: bool) -> Forest:
    """A random forest's trees, read from the nodes Spark saves (each node's split, children and class counts).

    Spark numbers a tree's nodes in pre-order (a parent before its children),
    the order :class:`~spanedge.models.portable.Tree` wants. A classifier's leaf
    keeps the share of label 1 among its weighted training rows, what Spark
    averages over the trees.
    """
    with tempfile.TemporaryDirectory(prefix="spanedge-forest-") as folder:
        path = Path(folder) / "model"
        fitted.write().save(str(path))
        rows = spark.read.parquet(str(path / "data")).collect()
    nodes: dict[int, list[Any]] = {}
    for row in rows:
        nodes.setdefault(int(row["treeID"]), []).append(row["nodeData"])
    return Forest(
        trees=[_tree(sorted(nodes[t], key=lambda n: n["id"]), classifier) for t in sorted(nodes)], classifier=classifier
    )


def _tree(nodes: list[Any], classifier: bool) -> Tree:
    feature, threshold, left, right, value = [], [], [], [], []
    for node in nodes:
        split = node["split"]
        leaf = node["leftChild"] < 0
        feature.append(-1 if leaf else int(split["featureIndex"]))
        threshold.append(0.0 if leaf else float(split["leftCategoriesOrThreshold"][0]))
        left.append(0 if leaf else int(node["leftChild"]))
        right.append(0 if leaf else int(node["rightChild"]))
        if classifier:
            stats = [float(s) for s in node["impurityStats"]]
            total = sum(stats)
            value.append(stats[1] / total if total and len(stats) > 1 else 0.0)
        else:
            value.append(float(node["prediction"]))
    return Tree(feature=feature, threshold=threshold, left=left, right=right, value=value)


def export(spark: Any, algorithm: str, fitted: Any) -> Model:
    """The portable parameters of ``fitted``, a model of ``algorithm`` (:class:`spanedge.models.Algorithm`)."""
    if algorithm == "linear_regression":
        return export_linear(fitted)
    if algorithm == "logistic_regression":
        return export_logistic(fitted)
    if algorithm == "kmeans":
        return export_kmeans(fitted)
    return export_forest(spark, fitted, classifier=algorithm == "random_forest")
