"""``edgeserve gateway``: flags and a config file → :class:`~edgeserve.gateway.config.GatewayConfig`
→ the gateway. Flags win over the file; ``--local`` and ``--cloud`` add targets to the file's.

The gateway is one event loop on one core. Before numpy is first imported (the gateway's modules
are imported inside the functions below for that reason) its BLAS is held to one thread: the
semantic cache's lookup is a matrix-vector product that OpenBLAS would otherwise spread over all
cores, and on a busy 2-core host waking those threads took 13 ms where one thread takes 0.25 ms
(10,000 × 256 rows). ``uvloop`` runs the loop where it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def add_parser(subparsers: argparse._SubParsersAction, help_: str) -> None:
    from edgeserve.gateway.config import CLOUD_KEY_ENV
    from sim.core.policies import POLICIES

    p = subparsers.add_parser(
        "gateway", help=help_,
        description="An OpenAI-compatible gateway that runs the simulator's offload policy "
        "(the same Policy.decide as `edgeserve sim`) live: each request goes to a local "
        "edgeserve server or a cloud endpoint (falling back to the next when one fails), is "
        "answered from the semantic cache, or is dropped, possibly with a smaller image or model; "
        "every decision is written to the trace. For each request, in this order: the semantic "
        "cache (--cache-capacity) may answer it; else the config file's routes (example "
        "utterances per route) pick a place and model when the request's text is near enough "
        "to a route's example (route_threshold, 0.8); else the policy decides. "
        "POST /admin/policy {\"policy\": NAME} switches the policy for the next request. "
        "See docs/gateway.md.",
    )
    p.add_argument("--config", metavar="FILE", help="YAML/JSON gateway config (targets with "
                   "models and api_key_env, policy with params, limits); flags win over it")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8100)")
    p.add_argument("--local", action="append", default=[], metavar="[NAME=]URL",
                   help="a local edgeserve server (repeatable)")
    p.add_argument("--cloud", action="append", default=[], metavar="[NAME=]URL",
                   help=f"an OpenAI-compatible cloud base URL (repeatable); its API key is read "
                   f"from ${CLOUD_KEY_ENV} (per-target env vars: use --config)")
    p.add_argument("--policy", choices=sorted(POLICIES),
                   help="offload policy (default always_local); params via --config")
    p.add_argument("--api-key", action="append", dest="api_keys", metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (repeatable for several keys)")
    p.add_argument("--rate-limit", type=float, dest="rate_limit_per_s", metavar="PER_S",
                   help="requests per second per API key (per client address without keys); "
                   "0: unlimited (default)")
    p.add_argument("--rate-burst", type=int, metavar="N", help="requests a key may send at once (default 10)")
    p.add_argument("--trace", metavar="FILE", help="write one record per request (JSON Lines)")
    p.add_argument("--profile", metavar="PROFILE",
                   help="device profile (name or YAML): the simulator's local latency estimate "
                   "and, where the host has no sensors, the virtual thermal/battery model")
    p.add_argument("--sensors", choices=["auto", "virtual"],
                   help="auto: the host's temperature/battery sensors where it has them, else "
                   "the profile's virtual ones (default); virtual: always the profile's")
    p.add_argument("--cache-capacity", type=int, metavar="N",
                   help="semantic cache of N answers (needs pip install 'edgeserve[cache]'); "
                   "0: none (default)")
    p.add_argument("--cache-ttl", type=float, dest="cache_ttl_s", metavar="S",
                   help="seconds a cached answer lives (default 300)")
    p.add_argument("--cache-threshold", type=float, metavar="COS",
                   help="cosine similarity of the request texts for a hit, with the same numbers, "
                   "negations and word order (default 0.945: at most 1%% false hits on the "
                   "labelled near-miss pairs)")
    p.add_argument("--mask-cloud", dest="mask_cloud", action="store_const", const=True,
                   help="send requests to cloud targets with the personal data in their text "
                   "(e-mail, phone, card, IBAN, IP) replaced by numbered placeholders such as "
                   "<email_1>, and put the originals back into the answer (streamed or not) "
                   "before it reaches the client; local targets get the text as sent (default: "
                   "off; mask_cloud: true in the config file)")
    p.add_argument("--no-local-overflow", dest="local_overflow", action="store_const",
                   const=False, help="never pass a busy (429) or failed local server's request "
                   "to the cloud")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from edgeserve.gateway.app import run as run_gateway
    from edgeserve.gateway.config import Place, load_gateway_config, parse_target
    from edgeserve.gateway.embedder import EmbedderUnavailable
    from edgeserve.gateway.state import build_state
    from sim.scenario.schema import ConfigError

    flag_targets = ([parse_target(s, Place.LOCAL, i) for i, s in enumerate(args.local)]
                    + [parse_target(s, Place.CLOUD, i) for i, s in enumerate(args.cloud)])
    overrides: dict[str, Any] = {
        k: getattr(args, k) for k in ("host", "port", "api_keys", "rate_limit_per_s",
                                      "rate_burst", "trace", "profile", "local_overflow",
                                      "sensors", "cache_capacity", "cache_ttl_s",
                                      "cache_threshold", "mask_cloud")
    }
    if args.policy is not None:
        overrides["policy"] = {"kind": args.policy}
    try:
        cfg = load_gateway_config(args.config, overrides, flag_targets)
        state = build_state(cfg)
    except (ConfigError, ValueError, EmbedderUnavailable) as e:
        print(f"edgeserve gateway: {e}", file=sys.stderr)
        return 2

    def say(line: str) -> None:
        print(f"edgeserve gateway: {line}", flush=True)

    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(run_gateway(state, say))
    except OSError as e:
        print(f"edgeserve gateway: cannot listen on {cfg.host}:{cfg.port}: {e.strerror}",
              file=sys.stderr)
        return 1


def _loop_factory() -> Any:
    """uvloop's event loop where it is installed (it comes with vLLM's server), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
