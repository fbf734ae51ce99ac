"""One /metrics page for all replicas: each family once, every sample labelled with its replica,
and the merged page still parses as Prometheus text."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from edgeserve.replicas.metrics_merge import labelled, merge_pages

PAGE = """# HELP edgeserve_requests_total Requests by outcome
# TYPE edgeserve_requests_total counter
edgeserve_requests_total{outcome="ok"} %d.0
# HELP edgeserve_ttft_seconds Time to first token
# TYPE edgeserve_ttft_seconds histogram
edgeserve_ttft_seconds_bucket{le="0.5"} %d.0
edgeserve_ttft_seconds_bucket{le="+Inf"} %d.0
edgeserve_ttft_seconds_count %d.0
edgeserve_ttft_seconds_sum 1.5
"""


def test_a_label_goes_first_in_braces_or_makes_them() -> None:
    assert labelled('a_total{x="1"} 2.0', 3) == 'a_total{replica="3",x="1"} 2.0'
    assert labelled("a_count 2.0", 0) == 'a_count{replica="0"} 2.0'
    assert labelled("a{} 2.0", 1) == 'a{replica="1"} 2.0'


def test_each_family_once_with_both_replicas_samples() -> None:
    merged = merge_pages([PAGE % (3, 1, 3, 3), PAGE % (5, 2, 5, 5)])
    assert merged.count("# TYPE edgeserve_requests_total counter") == 1
    fams = {f.name: f for f in text_string_to_metric_families(merged)}
    ok = {s.labels["replica"]: s.value for s in fams["edgeserve_requests"].samples
          if s.name == "edgeserve_requests_total"}
    assert ok == {"0": 3.0, "1": 5.0}
    counts = {s.labels["replica"]: s.value for s in fams["edgeserve_ttft_seconds"].samples
              if s.name == "edgeserve_ttft_seconds_count"}
    assert counts == {"0": 3.0, "1": 5.0}


def test_a_replica_that_did_not_answer_is_left_out() -> None:
    merged = merge_pages([None, PAGE % (5, 2, 5, 5)])
    assert 'replica="1"' in merged and 'replica="0"' not in merged
    assert merge_pages([None, None]) == "\n"
