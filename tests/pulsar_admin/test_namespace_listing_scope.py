"""A namespace's topics are listed from its own key ranges: the cost does not grow with other namespaces."""

from __future__ import annotations

import pytest

from nereus.broker.admin import namespaces, tenants, topics
from nereus.broker.admin.common import AdminContext, AdminError
from nereus.ledger.naming import TopicName
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import StreamStorage


class CountingMeta:
    """A MetadataStore wrapper that counts the keys its listings hand out."""

    def __init__(self, meta) -> None:
        self._meta = meta
        self.listed = 0

    def __getattr__(self, name):
        return getattr(self._meta, name)

    async def _counted(self, keys):
        async for key in keys:
            self.listed += 1
            yield key

    def list(self, *args, **kwargs):
        return self._counted(self._meta.list(*args, **kwargs))


@pytest.fixture
async def ctx():
    engine = open_engine(None, shards=4)
    meta = engine.client()
    objects = open_object_store("memory://")
    storage = StreamStorage(meta, objects, node_id="listing")
    yield AdminContext(storage=storage, meta=meta)
    await storage.close()
    await objects.close()
    await meta.close()
    await engine.close()


async def test_listing_reads_only_the_namespace(ctx):
    await tenants.create(ctx, "t", None)
    for ns in ("ns", "ns2", "big"):
        await namespaces.create(ctx, "t", ns, None)
    await topics.create_non_partitioned(ctx, TopicName.parse("persistent://t/ns/a"))
    await topics.create_partitioned_with_partitions(ctx, TopicName.parse("persistent://t/ns/p"), 3)
    for i in range(200):  # a crowded neighbour
        await topics.create_non_partitioned(ctx, TopicName.parse(f"persistent://t/big/topic-{i}"))
    await topics.create_partitioned_with_partitions(ctx, TopicName.parse("persistent://t/ns2/p"), 2)

    counting = CountingMeta(ctx.meta)
    scoped = AdminContext(storage=StreamStorage(counting, ctx.storage.objects, node_id="counting"), meta=counting)
    try:
        listed = await topics.namespace_topics(scoped, "t", "ns")
        assert [str(n) for n in listed] == ["persistent://t/ns/a"] + [f"persistent://t/ns/p-partition-{i}"
                                                                     for i in range(3)]
        assert [str(n) for n in await topics.partitioned_topics(scoped, "t", "ns")] == ["persistent://t/ns/p"]
        assert counting.listed == 4 + 1 + 1  # its streams, its partitioned topic (twice): none of "big"'s
    finally:
        await scoped.storage.close()


async def test_creation_functions_answer_as_the_handlers(ctx):
    with pytest.raises(AdminError) as missing:
        await topics.create_non_partitioned(ctx, TopicName.parse("persistent://t/ns/a"))
    assert missing.value.status == 404
    await tenants.create(ctx, "t", {"allowedClusters": []})
    await namespaces.create(ctx, "t", "ns", {})
    name = TopicName.parse("persistent://t/ns/a")
    await topics.create_non_partitioned(ctx, name)
    for create in (lambda: topics.create_non_partitioned(ctx, name),
                   lambda: topics.create_partitioned_with_partitions(ctx, name, 2),
                   lambda: tenants.create(ctx, "t", None),
                   lambda: namespaces.create(ctx, "t", "ns", None)):
        with pytest.raises(AdminError) as exists:
            await create()
        assert exists.value.status == 409
    with pytest.raises(AdminError) as bad:
        await topics.create_partitioned_with_partitions(ctx, TopicName.parse("persistent://t/ns/b"), 0)
    assert bad.value.status == 406
