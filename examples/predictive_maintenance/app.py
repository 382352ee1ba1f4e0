"""Predictive maintenance: machines with vibration and temperature sensors, a wear model learnt at the hub.

Each gateway scores its machines' readings with the ``wear`` model (a
logistic regression trained at the hub on Spark MLlib, on the failures the
maintenance crews report later) and raises an alert when the probability of
a failure is high; it also keeps a one-minute summary per machine. When a
plant's sensors drift (``spanedge simulate --fault drift:plant-b:rms:2.5@40s``),
its gateway reports the drift in its heartbeat and the hub trains a new
version, sent to every gateway with an event-time switch.
"""

from spanedge import App, agg, global_, sinks

app = App("maintenance")

readings = app.source("readings", time_field="ts")
failures = app.source("failures", time_field="ts")  # the crews' reports: the readings and whether it failed

wear = app.model(
    "wear",
    algorithm="logistic_regression",
    features=["rms", "peak", "temp_c"],
    label="failed",
    train_on=failures,
    every="1h",
    min_rows=500,
    max_psi=0.25,
)


@global_
def kept(report: dict) -> bool:
    """Every failure report goes to the hub, where the model learns from them."""
    return True


failures.filter(kept, name="reports").sink(sinks.memory("failure_reports"), name="failure_log")

scored = readings.predict(wear, output="p_fail", name="score", scope="local")
scored.filter(lambda r: r["p_fail"] > 0.8, name="likely").sink(sinks.mqtt("maintenance/alerts"), name="alerts")
summary = scored.window(
    name="machine_minute",
    key="machine",
    size="60s",
    aggs={"n": agg.count(), "p_max": agg.max_("p_fail"), "rms_mean": agg.mean("rms")},
    scope="local",
)
summary.sink(sinks.memory("summaries"), name="summaries_out", scope="global")
