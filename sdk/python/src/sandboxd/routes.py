"""Every (method, path) of the API this SDK calls.

Each HTTP request goes through ``Client._request(method, template, ...)``,
which refuses a route that is not listed here, so this table is exactly
what the SDK can reach; ``tests/test_routes.py`` compares it with
docs/openapi.yaml, docs/api.md and the running daemon.
"""

ROUTES = frozenset(
    {
        ("POST", "/v1/sandboxes"),
        ("GET", "/v1/sandboxes"),
        ("GET", "/v1/sandboxes/{id}"),
        ("POST", "/v1/sandboxes/{id}"),
        ("DELETE", "/v1/sandboxes/{id}"),
        ("POST", "/v1/sandboxes/{id}/exec"),
        ("POST", "/v1/sandboxes/{id}/extend"),
        ("POST", "/v1/sandboxes/{id}/network"),
        ("POST", "/v1/sandboxes/{id}/pause"),
        ("POST", "/v1/sandboxes/{id}/resume"),
        ("GET", "/v1/sandboxes/{id}/metrics"),
        ("GET", "/v1/sandboxes/{id}/terminal"),
        ("GET", "/v1/sandboxes/{id}/ports/{port}/{path}"),
        ("PUT", "/v1/sandboxes/{id}/ports/{port}/{path}"),
        ("POST", "/v1/sandboxes/{id}/ports/{port}/{path}"),
        ("DELETE", "/v1/sandboxes/{id}/ports/{port}/{path}"),
        ("HEAD", "/v1/sandboxes/{id}/ports/{port}/{path}"),
        ("PATCH", "/v1/sandboxes/{id}/ports/{port}/{path}"),
        ("OPTIONS", "/v1/sandboxes/{id}/ports/{port}/{path}"),
        ("POST", "/v1/sandboxes/{id}/ports/{port}/previews"),
        ("GET", "/v1/sandboxes/{id}/ports/{port}/previews"),
        ("DELETE", "/v1/sandboxes/{id}/previews/{preview_id}"),
        ("POST", "/v1/sandboxes/{id}/snapshots"),
        ("GET", "/v1/snapshots"),
        ("GET", "/v1/snapshots/{id}"),
        ("DELETE", "/v1/snapshots/{id}"),
        ("PUT", "/v1/sandboxes/{id}/files"),
        ("GET", "/v1/sandboxes/{id}/files"),
        ("DELETE", "/v1/sandboxes/{id}/files"),
        ("POST", "/v1/sandboxes/{id}/processes"),
        ("GET", "/v1/sandboxes/{id}/processes"),
        ("GET", "/v1/sandboxes/{id}/processes/{pid}/output"),
        ("POST", "/v1/sandboxes/{id}/processes/{pid}/stdin"),
        ("POST", "/v1/sandboxes/{id}/processes/{pid}/signal"),
        ("GET", "/v1/usage"),
        ("GET", "/v1/limits"),
        ("GET", "/v1/runtimes"),
        ("POST", "/v1/api_keys"),
        ("GET", "/v1/api_keys"),
        ("DELETE", "/v1/api_keys/{key_id}"),
        ("POST", "/v1/sandbox/executions"),
        ("GET", "/v1/sandbox/executions"),
        ("GET", "/v1/sandbox/executions/{id}"),
        ("GET", "/v1/receipts/{id}"),
        ("GET", "/v1/receipts/public-key"),
        ("GET", "/v1/openapi.json"),
    }
)
