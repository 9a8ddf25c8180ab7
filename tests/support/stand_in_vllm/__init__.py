"""A stand-in for a vLLM server (`server`, really generating with a small model, with faults on demand) and the
subprocess that runs it for a test (`process`). The real vLLM server is `tests.support.real_vllm_server`."""
