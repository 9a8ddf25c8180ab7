"""The extension's former path, kept for one release: use `maxent_grpo.serving.reload_extension` instead.

``--worker-extension-cls maxent_grpo.training.generation.backends.server_reload_extension.DiskReloadExtension``
still loads the same class; ``maxent-grpo vllm-serve`` passes the new, shorter path
(``maxent_grpo.serving.reload_extension.DiskReloadExtension``). Importing this path also loads the trainer's backends
into the server, which the new one does not.
"""

from maxent_grpo.serving.reload_extension import DiskReloadExtension

__all__ = ["DiskReloadExtension"]
