"""HTTP to one vLLM server: requests with retries, deadlines and health waits (`transport`), the request bodies and
the reading of answers (`wire`), a request that ends at a deadline (`http_deadline`), and the client TRL builds in
server mode (`trl_client`)."""
