"""Admin calls made as a role (a token signed with the node's secret), for the authorization tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from nereus.auth.tokens import create_token


def rest_as(node, role: str, method: str, path: str, body=None):
    """(status, decoded JSON body or None) of a call to ``node.http + path`` made as ``role``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(node.http + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {create_token(role, secret_key=node.secret)}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None
