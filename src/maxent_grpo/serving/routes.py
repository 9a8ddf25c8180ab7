"""The routes a server started by ``maxent-grpo vllm-serve`` answers, named once for the guard and the trainer.

``VLLM_SERVER_DEV_MODE=1``, which the trainer's weight push needs, opens vLLM's development routes: besides the few
the trainer calls, they pause, sleep and wake the engine, drop its caches, and run any worker method through
``POST /collective_rpc`` (vLLM's own ``reload_weights`` from any path, ``save_sharded_state`` into any folder, ...).
The server's middleware (`key_guard.ServerKeyGuard`) lets a request reach vLLM only on a route named here:

- `TRAINER_ROUTES`: what the trainer sends, with the disk transport (`DISK_ROUTES`; the client code imports these
  names) and with NCCL (`NCCL_ROUTES`, as TRL 1.16's ``VLLMClient`` calls them);
- `SERVED_ROUTES`: vLLM's inference API, which a server exists to answer (completions, chat, tokenization, the
  model list, version, metrics, its API docs);
- ``/collective_rpc`` only for the worker methods in `RPC_METHODS` (the reload extension's);
- a route of `REFUSED_ROUTES` only where the server was started with ``--allow-route`` naming it.

Every other route, and every route vLLM adds in a later release until it is named here, is answered 403
(`refusal`). A test of the vllm tier lists every route vLLM's app registers under dev mode, and every route path its
API routers declare (those behind other flags too), and fails when one is in neither `TRAINER_ROUTES`,
`SERVED_ROUTES` nor `REFUSED_ROUTES`, so that an upgrade cannot open a route silently.

This module imports only the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The method the reload extension (`reload_extension.DiskReloadExtension`) adds to vLLM's workers, named so that it
#: cannot clash with vLLM's own.
RELOAD_METHOD = "maxent_reload_weights"

HEALTH = "/health"
MODELS = "/v1/models"
COMPLETIONS = "/v1/completions"
COLLECTIVE_RPC = "/collective_rpc"
WEIGHT_INFO = "/weight_info"
UPDATE_WEIGHT_VERSION = "/update_weight_version"
RESET_PREFIX_CACHE = "/reset_prefix_cache"
SERVER_INFO = "/server_info"

#: What the trainer sends to a server with the disk transport (and without a weight transfer: generation only).
DISK_ROUTES = frozenset(
    {HEALTH, MODELS, COMPLETIONS, COLLECTIVE_RPC, WEIGHT_INFO, UPDATE_WEIGHT_VERSION, RESET_PREFIX_CACHE, SERVER_INFO}
)
#: What TRL 1.16's ``VLLMClient`` sends for the NCCL weight transfer (``init_communicator``, ``update_named_param``).
NCCL_ROUTES = frozenset(
    {
        HEALTH,
        MODELS,
        SERVER_INFO,
        "/get_world_size",
        "/init_weight_transfer_engine",
        "/start_weight_update",
        "/update_weights",
        "/finish_weight_update",
        RESET_PREFIX_CACHE,
    }
)
TRAINER_ROUTES = DISK_ROUTES | NCCL_ROUTES

#: vLLM's inference API and what describes the server: answered as vLLM answers them (with the key, where one is set).
SERVED_ROUTES = frozenset(
    {
        "/ping",
        "/load",
        "/version",
        "/metrics",
        "/tokenize",
        "/detokenize",
        "/invocations",
        "/kv_event_sources",
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        "/v1/chat/completions",
        "/v1/chat/completions/batch",
        "/v1/chat/completions/render",
        "/v1/chat/completions/derender",
        "/v1/completions/render",
        "/v1/completions/derender",
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/cancel",
        "/v1/responses/render",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/messages/render",
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/v1/realtime",
        "/generative_scoring",
        "/inference/v1/generate",
        "/cohere/v2/chat",
        "/cohere/v2/chat/render",
        "/tokenizer_info",
        "/ready",
        "/readyz",
        "/v1/embeddings",
        "/v2/embed",
        "/pooling",
        "/classify",
        "/score",
        "/v1/score",
        "/rerank",
        "/v1/rerank",
        "/v2/rerank",
    }
)

#: Routes vLLM opens (under dev mode, or to steer the engine) that the trainer never sends: each answers 403 unless
#: ``maxent-grpo vllm-serve --allow-route ROUTE`` opens it.
REFUSED_ROUTES = frozenset(
    {
        "/pause",
        "/resume",
        "/is_paused",
        "/sleep",
        "/wake_up",
        "/is_sleeping",
        "/release_kv_cache_memory",
        "/abort_requests",
        "/reset_mm_cache",
        "/reset_encoder_cache",
        "/start_draft_weight_update",
        "/scale_elastic_ep",
        "/is_scaling_elastic_ep",
        "/start_profile",
        "/stop_profile",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
        "/fault_tolerance/apply",
        "/fault_tolerance/status",
        "/static",
    }
)

#: The worker methods ``POST /collective_rpc`` may run: the reload extension's (vLLM's own are refused).
RPC_METHODS = frozenset({RELOAD_METHOD})

#: The environment variable through which ``maxent-grpo vllm-serve`` passes ``--allow-route`` to the server's guard
#: (the guard is built by vLLM, with no arguments).
ALLOWED_ROUTES_VARIABLE = "MAXENT_GRPO_ALLOWED_ROUTES"


def _pattern(route: str) -> re.Pattern[str]:
    """A route template (``/v1/responses/{response_id}``) as a pattern of the paths it matches (one segment a
    parameter), as vLLM's router matches them."""
    parts = re.split(r"\{[^/{}]+\}", route)
    return re.compile("[^/]+".join(map(re.escape, parts)))


class RouteAllowlist:
    """Which request paths reach vLLM: `TRAINER_ROUTES`, `SERVED_ROUTES` and the refused routes opened by name.

    Args:
        opened: routes of `REFUSED_ROUTES` to answer all the same (``--allow-route``).

    Raises:
        ValueError: ``opened`` names a route that is not one of `REFUSED_ROUTES` (the message lists them).
    """

    def __init__(self, opened: Iterable[str] = ()) -> None:
        opened = frozenset(opened)
        unknown = sorted(opened - REFUSED_ROUTES)
        if unknown:
            raise ValueError(
                f"--allow-route {' '.join(unknown)}: not a route that maxent-grpo vllm-serve refuses; it opens only "
                f"{', '.join(sorted(REFUSED_ROUTES))}"
            )
        self.opened = opened
        allowed = TRAINER_ROUTES | SERVED_ROUTES | opened
        self._exact = frozenset(route for route in allowed if "{" not in route)
        self._templates = tuple(_pattern(route) for route in allowed if "{" in route)

    def allows(self, path: str) -> bool:
        """Whether ``path`` (the request's decoded path, as vLLM routes it) is one of the allowed routes."""
        return path in self._exact or any(pattern.fullmatch(path) for pattern in self._templates)


def refusal(method: str, path: str) -> str:
    """The one line a refused route answers with."""
    return (
        f"maxent-grpo vllm-serve does not serve {method} {path}: it answers the trainer's routes and vLLM's "
        "inference API only (--allow-route opens a development route by name)"
    )


def rpc_refusal(method: object) -> str:
    """The one line a refused ``POST /collective_rpc`` answers with."""
    return (
        f"maxent-grpo vllm-serve does not run the worker method {method!r} through {COLLECTIVE_RPC}: it runs "
        f"{', '.join(sorted(RPC_METHODS))} only"
    )
