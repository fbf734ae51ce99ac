"""The gateway's Prometheus metrics (``GET /metrics``), in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from edgeserve.metrics import LATENCY_BUCKETS_S


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("edgeserve_gateway_requests", "Requests by placement and outcome",
                                ["placement", "outcome"], registry=r)
        self.fallbacks = Counter("edgeserve_gateway_fallbacks",
                                 "Calls that failed and moved on to the next target",
                                 ["target", "kind"], registry=r)
        self.e2e_seconds = Histogram("edgeserve_gateway_e2e_seconds",
                                     "Arrival to the last byte, by placement", ["placement"],
                                     buckets=LATENCY_BUCKETS_S, registry=r)
        self.queue = Gauge("edgeserve_gateway_target_queue", "Waiting requests per target",
                           ["target"], registry=r)
        self.inflight = Gauge("edgeserve_gateway_target_inflight",
                              "Gateway requests in flight per target", ["target"], registry=r)
        self.temp_c = Gauge("edgeserve_gateway_temperature_celsius",
                            "Device temperature the policy sees", registry=r)
        self.predicted = Gauge("edgeserve_gateway_predicted_latency_seconds",
                               "Latest predicted latency per path", ["path"], registry=r)
