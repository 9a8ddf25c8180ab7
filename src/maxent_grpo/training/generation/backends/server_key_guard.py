"""The guard's former path, kept for one release: use `maxent_grpo.serving.key_guard`.

``--middleware maxent_grpo.training.generation.backends.server_key_guard.ServerKeyGuard`` still adds the same guard
(the key, the route allowlist, CORS preflights); the shorter ``maxent_grpo.serving.key_guard.ServerKeyGuard`` does not
load the trainer's code into the server.
"""

from maxent_grpo.serving.key_guard import ServerKeyGuard, authorization_headers

__all__ = ["ServerKeyGuard", "authorization_headers"]
