"""The load generator behind ``edgeserve bench``: workloads, arrivals, a streaming client, reports.

Pipeline of one run: :mod:`workload` builds every request body before the clock starts,
:mod:`arrivals` draws the send times, :mod:`runner` sends them with the streaming
:mod:`client`, :mod:`report` turns what the client saw into ``vllm bench serve``-named figures
and :mod:`server_metrics` adds what the server's ``/metrics`` says. :mod:`sweep` repeats runs over
request rates, :mod:`compare` does that for several servers it starts itself, :mod:`plots` draws.
"""
