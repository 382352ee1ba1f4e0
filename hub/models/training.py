"""Training one version of a model with ``pyspark.ml`` on a DataFrame of labelled records.

The records are split at random (seeded) into a training part and a held-out
part (:data:`HELD_OUT`); the model is fitted on the first, its metrics are
measured on the second, and the feature statistics are those of the first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hub.models.export import export
from spanedge.errors import SpanEdgeError
from spanedge.models.spec import Algorithm, ModelSpec
from spanedge.models.stats import FeatureStats
from spanedge.models.version import ModelVersion

#: The share of records held out for the metrics.
HELD_OUT = 0.2
#: The quantiles that make each feature's bins (deciles).
QUANTILES = tuple(i / 10 for i in range(1, 10))
#: The column holding the assembled feature vector.
VECTOR = "_spanedge_features"
PREDICTION = "_spanedge_prediction"


class TrainingFailed(SpanEdgeError, ValueError):
    """A model could not be trained (too few records, a bad label, ...); the message says why and what to do."""


@dataclass(frozen=True)
class Trained:
    """A trained version, the fitted Spark model and the held-out records (features assembled)."""

    version: ModelVersion
    fitted: Any
    held_out: Any


def _estimator(spec: ModelSpec, seed: int) -> Any:
    from pyspark.ml.classification import LogisticRegression, RandomForestClassifier
    from pyspark.ml.clustering import KMeans
    from pyspark.ml.regression import LinearRegression, RandomForestRegressor

    common: dict[str, Any] = {"featuresCol": VECTOR, "predictionCol": PREDICTION}
    label = spec.label or ""
    algo = spec.algorithm
    if algo is Algorithm.LOGISTIC_REGRESSION:
        return LogisticRegression(labelCol=label, maxIter=spec.param("max_iter"), family="binomial", **common)
    if algo is Algorithm.LINEAR_REGRESSION:
        return LinearRegression(labelCol=label, maxIter=spec.param("max_iter"), **common)
    if algo is Algorithm.KMEANS:
        return KMeans(k=spec.param("k"), maxIter=spec.param("max_iter"), seed=seed, **common)
    forest = RandomForestClassifier if algo is Algorithm.RANDOM_FOREST else RandomForestRegressor
    return forest(labelCol=label, numTrees=spec.param("trees"), maxDepth=spec.param("depth"), seed=seed, **common)


def _metrics(spec: ModelSpec, fitted: Any, scored: Any) -> dict[str, float]:
    from pyspark.ml.evaluation import (
        BinaryClassificationEvaluator,
        ClusteringEvaluator,
        MulticlassClassificationEvaluator,
        RegressionEvaluator,
    )

    algo = spec.algorithm
    label = spec.label or ""
    out: dict[str, float] = {}
    if algo.classifier:
        binary = BinaryClassificationEvaluator(labelCol=label, rawPredictionCol="rawPrediction")
        multi = MulticlassClassificationEvaluator(labelCol=label, predictionCol=PREDICTION)
        out["auc"] = binary.evaluate(scored)
        out["accuracy"] = multi.evaluate(scored, {multi.metricName: "accuracy"})
        out["log_loss"] = multi.evaluate(scored, {multi.metricName: "logLoss"})
    elif algo is Algorithm.KMEANS:
        clusters = ClusteringEvaluator(featuresCol=VECTOR, predictionCol=PREDICTION)
        out["silhouette"] = clusters.evaluate(scored)
        out["training_cost"] = float(fitted.summary.trainingCost)
    else:
        evaluator = RegressionEvaluator(labelCol=label, predictionCol=PREDICTION)
        for name in ("rmse", "mae", "r2"):
            out[name] = evaluator.evaluate(scored, {evaluator.metricName: name})
    return {k: float(v) for k, v in out.items() if v == v and abs(v) != float("inf")}


def feature_stats(df: Any, features: tuple[str, ...]) -> list[FeatureStats]:
    """Mean, standard deviation, range and decile bins (with each bin's share of rows) of each feature of ``df``."""
    from pyspark.sql import functions as F

    aggs = []
    for f in features:
        aggs += [F.mean(f), F.stddev_pop(f), F.min(f), F.max(f)]
    basics = df.agg(*aggs, F.count(F.lit(1))).first()
    n = int(basics[-1])
    quantiles = df.approxQuantile(list(features), list(QUANTILES), 0.001)
    edges = [sorted(set(q)) for q in quantiles]
    counts: list[Any] = []
    for f, e in zip(features, edges, strict=True):
        lows = [None, *e]
        highs = [*e, None]
        for low, high in zip(lows, highs, strict=True):
            cond = F.lit(True)
            if low is not None:
                cond = cond & (F.col(f) > low)
            if high is not None:
                cond = cond & (F.col(f) <= high)
            counts.append(F.sum(F.when(cond, 1).otherwise(0)))
    binned = df.agg(*counts).first() if counts else []
    out, at = [], 0
    for i, (f, e) in enumerate(zip(features, edges, strict=True)):
        shares = [float(binned[at + j] or 0) / n if n else 0.0 for j in range(len(e) + 1)]
        at += len(e) + 1
        mean, std, low, high = (float(basics[4 * i + j] or 0.0) for j in range(4))
        out.append(FeatureStats(field=f, mean=mean, std=std, min=low, max=high, edges=e, shares=shares))
    return out


def train(
    spark: Any,
    spec: ModelSpec,
    df: Any,
    *,
    app: str,
    version: int,
    reason: str,
    seed: int = 7,
    now: float | None = None,
) -> Trained:
    """Fit version ``version`` of ``spec`` on ``df`` (one column per feature and the label, an optional ``event_time``).

    Raises:
        TrainingFailed: fewer training rows than ``spec.min_rows``, or a classifier's label is not 0 or 1.
    """
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    columns = [*spec.features, *([spec.label] if spec.label else [])]
    clean = df.select(*[F.col(c).cast("double").alias(c) for c in columns], *_time_column(df)).dropna(subset=columns)
    assembled = VectorAssembler(inputCols=list(spec.features), outputCol=VECTOR).transform(clean)
    training, held_out = assembled.randomSplit([1 - HELD_OUT, HELD_OUT], seed=seed)
    training, held_out = training.cache(), held_out.cache()
    rows, held = training.count(), held_out.count()
    if rows < spec.min_rows or held == 0:
        msg = (
            f"{spec.describe()}: {rows} training rows (and {held} held out) from '{spec.train_on}', "
            f"fewer than min_rows={spec.min_rows}; wait for more labelled records or lower min_rows"
        )
        raise TrainingFailed(msg)
    if spec.algorithm.classifier:
        labels = {r[0] for r in training.select(spec.label or "").distinct().limit(3).collect()}
        if not labels <= {0.0, 1.0} or len(labels) < 2:
            msg = (
                f"{spec.describe()}: label '{spec.label}' must take the values 0 and 1 (both present), "
                f"got {sorted(labels)[:3]}; map it to 0/1 upstream of '{spec.train_on}'"
            )
            raise TrainingFailed(msg)
    fitted = _estimator(spec, seed).fit(training)
    metrics = _metrics(spec, fitted, fitted.transform(held_out))
    times = training.agg(F.min("event_time"), F.max("event_time")).first() if "event_time" in clean.columns else None
    made = ModelVersion(
        app=app,
        model=spec.name,
        version=version,
        algorithm=spec.algorithm.value,
        features=list(spec.features),
        label=spec.label,
        trained_at=time.time() if now is None else now,
        reason=reason[:500],
        rows=rows,
        held_out=held,
        time_from=None if times is None or times[0] is None else float(times[0]),
        time_to=None if times is None or times[1] is None else float(times[1]),
        metrics=metrics,
        stats=feature_stats(training, spec.features),
        params=export(spark, spec.algorithm.value, fitted),
    )
    training.unpersist()
    return Trained(made, fitted, held_out)


def _time_column(df: Any) -> list[Any]:
    from pyspark.sql import functions as F

    return [F.col("event_time").cast("double").alias("event_time")] if "event_time" in df.columns else []
