"""``namespaces`` and ``topics`` ``set-/get-/remove-`` ``publish-rate``, ``dispatch-rate`` and
``subscription-dispatch-rate``, with pulsar-admin's flags."""

from __future__ import annotations

import click

from .args import namespace_path, topic_path
from .namespaces import namespaces
from .session import json_option, pass_session
from .topics import topics


def _publish_options(command):
    command = click.option("-b", "--byte-publish-rate", "bytes_", type=int, default=-1, show_default=True,
                           help="Bytes per second (-1: unlimited).")(command)
    return click.option("-m", "--msg-publish-rate", "messages", type=int, default=-1, show_default=True,
                        help="Messages per second (-1: unlimited).")(command)


def _dispatch_options(command):
    for decorator in (
            click.option("-rp", "--relative-to-publish-rate", "relative", is_flag=True,
                         help="Rates relative to the publish rate (stored; not applied)."),
            click.option("-dt", "--dispatch-rate-period", "period", type=click.IntRange(1), default=1,
                         show_default=True, help="The period in seconds the permits are for."),
            click.option("-bd", "--byte-dispatch-rate", "bytes_", type=int, default=-1, show_default=True,
                         help="Bytes per period (-1: unlimited)."),
            click.option("-md", "--msg-dispatch-rate", "messages", type=int, default=-1, show_default=True,
                         help="Messages per period (-1: unlimited).")):
        command = decorator(command)
    return command


def _publish_body(messages, bytes_, **_):
    return {"publishThrottlingRateInMsg": messages, "publishThrottlingRateInByte": bytes_}


def _dispatch_body(messages, bytes_, period, relative):
    return {"dispatchThrottlingRateInMsg": messages, "dispatchThrottlingRateInByte": bytes_,
            "ratePeriodInSecond": period, "relativeToPublishRate": relative}


def _view(value) -> str:
    return "not set" if not value else "\n".join(f"{k}: {v}" for k, v in value.items())


def _add(group, name: str, suffix: str, options, body, path_of, what: str) -> None:
    @group.command(f"get-{name}")
    @click.argument(what)
    @json_option
    @pass_session
    def get(s, **kw):
        s.emit(s.client.get(f"{path_of(kw[what])}/{suffix}"), view=_view)

    @group.command(f"set-{name}")
    @click.argument(what)
    @options
    @pass_session
    def set_(s, **kw):
        s.client.post(f"{path_of(kw.pop(what))}/{suffix}", body(**kw))

    @group.command(f"remove-{name}")
    @click.argument(what)
    @pass_session
    def remove(s, **kw):
        s.client.delete(f"{path_of(kw[what])}/{suffix}")

    label = name.replace("-", " ")
    get.__doc__, set_.__doc__, remove.__doc__ = (f"Show the {label}.", f"Set the {label} (throttled above it).",
                                                 f"Remove the {label}.")


for _name, _suffix, _options, _body in (
        ("publish-rate", "publishRate", _publish_options, _publish_body),
        ("dispatch-rate", "dispatchRate", _dispatch_options, _dispatch_body),
        ("subscription-dispatch-rate", "subscriptionDispatchRate", _dispatch_options, _dispatch_body)):
    _add(namespaces, _name, _suffix, _options, _body, lambda ns: f"/namespaces/{namespace_path(ns)}", "namespace")
    _add(topics, _name, _suffix, _options, _body, topic_path, "topic")

__all__: list[str] = []
