"""The console's topic page shows each remote cluster's replicator (a real browser, two clusters)."""

from __future__ import annotations

import urllib.parse

import pulsar
from playwright.sync_api import expect

from tests.console.test_browser import browser, page  # noqa: F401 (fixtures)
from tests.replication.geo import clusters, replicate_namespace


def test_the_topic_page_shows_the_replication_to_the_other_cluster(tmp_path, page):  # noqa: F811
    with clusters(tmp_path, ["east", "west"]) as (east, west):
        replicate_namespace([east, west], "geo/console")
        topic = "persistent://geo/console/t"
        client = pulsar.Client(east.node.url)
        try:
            producer = client.create_producer(topic)
            for i in range(10):
                producer.send(f"m-{i}".encode())
            page.goto(east.node.http + "/console#/topic/" + urllib.parse.quote(topic, safe=""))
            row = page.locator('tr[data-remote="west"]')
            expect(row).to_contain_text("yes")
            expect(row.locator("td.replication-backlog")).to_have_text("0")
            assert page.errors == []
        finally:
            client.close()
