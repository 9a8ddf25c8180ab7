"""What runs inside the vLLM server's processes that ``maxent-grpo vllm-serve`` starts.

- `reload_extension`: the worker extension the disk weight transfer calls through ``/collective_rpc``;
- `in_place_reload`: vLLM's layer-wise reload, checked (also used by the colocated engine);
- `weight_delta`: the format of a version written as the changes since the one before;
- `key_guard`: the middleware every request passes first (the server's key, the route allowlist, CORS preflights);
- `watchdog`: the process that ends the server when the command that started it is killed.

Nothing here imports the trainer: the server loads these modules by their dotted paths (``--middleware``,
``--worker-extension-cls``), and what they import runs in the server. A test pins that importing this package loads
nothing from ``maxent_grpo.training``.
"""
