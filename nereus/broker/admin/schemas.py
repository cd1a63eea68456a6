"""``/admin/v2/schemas/{tenant}/{namespace}/{topic}/...``: the schema registry over REST.

Same registry as the protocol's GET_SCHEMA / GET_OR_CREATE_SCHEMA and producers'
schemas (``nereus.pulsar.server.schemas``); JSON shapes follow Pulsar's
``GetSchemaResponse``, ``PostSchemaPayload`` and ``PostSchemaResponse``.
"""

from __future__ import annotations

from aiohttp import web

from ...pulsar.server import schemas
from .common import AdminError, body, context, flag, topic_name


def _response(info: schemas.SchemaInfo) -> dict:
    return {"version": info.version, "type": info.type, "timestamp": info.timestamp,
            "data": info.data.decode("utf-8", errors="replace"), "properties": info.props}


async def get_schema(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request)
    version = request.match_info.get("version")
    if version is not None:
        try:
            version = int(version)
        except ValueError:
            raise AdminError(400, "The schema version must be an integer") from None
    info = await schemas.get(ctx.meta, name, version)
    if info is None:
        raise AdminError(404, "Schema not found")
    if info.deleted:
        raise AdminError(404, "Schema is deleted")
    return web.json_response(_response(info))


async def get_all(request: web.Request) -> web.Response:
    ctx = context(request)
    versions = schemas.live(await schemas.history(ctx.meta, topic_name(request)))
    if not versions:
        raise AdminError(404, "Schemas not found")
    return web.json_response({"getSchemaResponses": [_response(v) for v in versions]})


def _payload(value) -> tuple[str, bytes, dict]:
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise AdminError(400, "The body must be {\"type\": ..., \"schema\": ..., \"properties\": {...}}")
    type_ = value["type"].upper()
    if type_ not in schemas.TYPE_NAMES:
        raise AdminError(400, f"Unknown schema type {value['type']!r}")
    data = value.get("schema") or ""
    props = value.get("properties") or {}
    if not isinstance(data, str) or not isinstance(props, dict):
        raise AdminError(400, "schema must be a string and properties an object")
    return type_, data.encode(), {str(k): str(v) for k, v in props.items()}


async def post_schema(request: web.Request) -> web.Response:
    ctx = context(request)
    type_, data, props = _payload(await body(request))
    try:
        version = await schemas.put_if_absent(ctx.meta, topic_name(request), type_, data, props,
                                              default_strategy=ctx.pulsar.registry.schema_compatibility_strategy)
    except schemas.IncompatibleSchema as exc:
        raise AdminError(409, str(exc)) from None
    except schemas.InvalidSchema as exc:
        raise AdminError(422, f"Invalid schema definition: {exc}") from None
    return web.json_response({"version": {"version": version}})


async def delete_schema(request: web.Request) -> web.Response:
    ctx = context(request)
    version = await schemas.delete(ctx.meta, topic_name(request), force=flag(request, "force"))
    return web.json_response({"version": -1 if version is None else version})


async def compatibility(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request)
    type_, data, props = _payload(await body(request))
    strategy = await schemas.strategy_of(ctx.meta, name, ctx.pulsar.registry.schema_compatibility_strategy)
    current = schemas.live(await schemas.history(ctx.meta, name))
    try:
        ok = schemas.is_compatible(strategy, type_, data, current, props)
    except schemas.InvalidSchema as exc:
        raise AdminError(422, f"Invalid schema definition: {exc}") from None
    return web.json_response({"isCompatibility": ok, "schemaCompatibilityStrategy": strategy})


def add_routes(router: web.UrlDispatcher) -> None:
    t = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
    router.add_get(t + "/schema", get_schema)
    router.add_get(t + "/schema/{version}", get_schema)
    router.add_get(t + "/schemas", get_all)
    router.add_post(t + "/schema", post_schema)
    router.add_delete(t + "/schema", delete_schema)
    router.add_post(t + "/compatibility", compatibility)
