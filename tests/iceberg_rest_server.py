"""A writable Iceberg REST catalog for tests: the spec's endpoints over pyiceberg's SQL catalog.

External REST catalogs (Polaris, Lakekeeper, Gravitino, Unity, Glue's REST endpoint) keep
tables behind these endpoints and check a commit's requirements against the table's
current metadata; none installs from the package registries here. This one does the
same over an SQLite file, so a test can take the catalog back to an older state by
restoring that file, as an operator restoring a catalog's backup would.

Run: ``python -m tests.iceberg_rest_server --db PATH --warehouse URL [--port 0]``; the first
line printed is ``port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
_SEPARATOR = "\x1f"


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def _levels(text: str) -> tuple[str, ...]:
    return tuple(unquote(text).split(_SEPARATOR))


def _loaded(table) -> dict:
    return {"metadata-location": table.metadata_location, "metadata": json.loads(table.metadata.model_dump_json()),
            "config": {}}


def build_app(catalog) -> web.Application:
    from pyiceberg.catalog.rest import CreateTableRequest
    from pyiceberg.exceptions import (CommitFailedException, NamespaceAlreadyExistsError, NoSuchNamespaceError,
                                      NoSuchTableError, TableAlreadyExistsError)
    from pyiceberg.table import CommitTableRequest

    failures = {NoSuchTableError: (404, "NoSuchTableException"), NoSuchNamespaceError: (404, "NoSuchNamespaceException"),
                TableAlreadyExistsError: (409, "AlreadyExistsException"),
                NamespaceAlreadyExistsError: (409, "AlreadyExistsException"),
                CommitFailedException: (409, "CommitFailedException")}

    def handler(blocking):
        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            try:
                return await asyncio.to_thread(blocking, request, body)
            except tuple(failures) as exc:
                status, kind = failures[type(exc)]
                return _error(status, kind, str(exc))
        return handle

    def config(_request, _body):
        return web.json_response({"defaults": {}, "overrides": {}})

    def list_namespaces(request, _body):
        parent = request.query.get("parent")
        children = catalog.list_namespaces(_levels(parent) if parent else ())
        return web.json_response({"namespaces": [list(ns) for ns in children]})

    def create_namespace(_request, body):
        given = json.loads(body)
        catalog.create_namespace(tuple(given["namespace"]), given.get("properties") or {})
        return web.json_response({"namespace": given["namespace"], "properties": given.get("properties") or {}})

    def load_namespace(request, _body):
        levels = _levels(request.match_info["namespace"])
        properties = catalog.load_namespace_properties(levels)
        if request.method == "HEAD":
            return web.Response(status=204)
        return web.json_response({"namespace": list(levels), "properties": properties})

    def list_tables(request, _body):
        levels = _levels(request.match_info["namespace"])
        return web.json_response({"identifiers": [{"namespace": list(levels), "name": ident[-1]}
                                                  for ident in catalog.list_tables(levels)]})

    def create_table(request, body):
        levels = _levels(request.match_info["namespace"])
        given = CreateTableRequest.model_validate({"location": None, **json.loads(body)})  # optional in the spec
        options = {"location": given.location, "properties": given.properties}
        if given.partition_spec is not None:
            options["partition_spec"] = given.partition_spec
        if given.write_order is not None:
            options["sort_order"] = given.write_order
        return web.json_response(_loaded(catalog.create_table((*levels, given.name), given.table_schema, **options)))

    def table(request, body):
        ident = (*_levels(request.match_info["namespace"]), unquote(request.match_info["table"]))
        if request.method == "DELETE":
            catalog.drop_table(ident)
            return web.Response(status=204)
        loaded = catalog.load_table(ident)
        if request.method == "HEAD":
            return web.Response(status=204)
        if request.method == "GET":
            return web.json_response(_loaded(loaded))
        commit = CommitTableRequest.model_validate_json(body)
        done = catalog.commit_table(loaded, tuple(commit.requirements), tuple(commit.updates))
        return web.json_response({"metadata-location": done.metadata_location,
                                  "metadata": json.loads(done.metadata.model_dump_json())})

    app = web.Application()
    namespace, table_path = "/v1/namespaces/{namespace}", "/v1/namespaces/{namespace}/tables/{table}"
    app.router.add_get("/v1/config", handler(config))
    app.router.add_get("/v1/namespaces", handler(list_namespaces))
    app.router.add_post("/v1/namespaces", handler(create_namespace))
    app.router.add_route("GET", namespace, handler(load_namespace))
    app.router.add_route("HEAD", namespace, handler(load_namespace))
    app.router.add_get(namespace + "/tables", handler(list_tables))
    app.router.add_post(namespace + "/tables", handler(create_table))
    for method in ("GET", "HEAD", "POST", "DELETE"):
        app.router.add_route(method, table_path, handler(table))
    return app


class RestCatalogServer:
    """The server in a process of its own; ``uri`` once started."""

    def __init__(self, db: Path, warehouse: str, log: Path) -> None:
        self.db, self.warehouse, self.log = db, warehouse, log
        self.proc: subprocess.Popen | None = None
        self.uri = ""

    def start(self) -> str:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.iceberg_rest_server", "--db", str(self.db),
                                      "--warehouse", self.warehouse], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=open(self.log, "ab"), text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the REST catalog did not start: {self.log.read_text()[-2000:]}")
        self.uri = f"http://127.0.0.1:{int(line.split()[1])}"
        return self.uri

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(30)
            self.proc = None


async def _serve(db: str, warehouse: str, port: int) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("rest-backend", uri=f"sqlite:///{db}", warehouse=warehouse)
    runner = web.AppRunner(build_app(catalog))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    print(f"port {site._server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", required=True)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(_serve(args.db, args.warehouse, args.port))


if __name__ == "__main__":
    main()
