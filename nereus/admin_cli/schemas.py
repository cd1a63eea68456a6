"""``nereus admin schemas``: get, upload, delete."""

from __future__ import annotations

import json

import click

from .args import schema_path
from .http import AdminCliError
from .session import group, json_option, pass_session

schemas = group("schemas", "Schemas of a topic: get, upload, delete.")


@schemas.command("get")
@click.argument("topic")
@click.option("-v", "--version", type=click.IntRange(0), help="This version (default: the latest).")
@json_option
@pass_session
def get(s, topic, version):
    """Show TOPIC's schema."""
    suffix = "" if version is None else f"/{version}"
    s.emit(s.client.get(f"{schema_path(topic)}/schema{suffix}"))


@schemas.command("upload")
@click.argument("topic")
@click.option("-f", "--filename", type=click.Path(dir_okay=False), required=True,
              help='A JSON file: {"type": "AVRO", "schema": "<definition>", "properties": {}}.')
@json_option
@pass_session
def upload(s, topic, filename):
    """Register a schema for TOPIC from a JSON file (as pulsar-admin takes it)."""
    try:
        with open(filename, encoding="utf-8") as f:
            payload = json.load(f)
    except OSError as exc:
        raise AdminCliError(f"cannot read {filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise AdminCliError(f"{filename} is not valid JSON: {exc}") from None
    if not isinstance(payload, dict) or "type" not in payload:
        raise AdminCliError(f'{filename}: expected {{"type": ..., "schema": ..., "properties": {{...}}}}')
    if isinstance(payload.get("schema"), (dict, list)):  # a definition written as JSON rather than a string
        payload["schema"] = json.dumps(payload["schema"])
    s.emit(s.client.post(f"{schema_path(topic)}/schema", payload))


@schemas.command("delete")
@click.argument("topic")
@click.option("-f", "--force", is_flag=True, help="Delete every version for good.")
@json_option
@pass_session
def delete(s, topic, force):
    """Delete TOPIC's schema."""
    s.emit(s.client.delete(f"{schema_path(topic)}/schema", query={"force": "true"} if force else None))
