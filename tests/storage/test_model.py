"""Random append / fetch / trim / restart sequences agree with a plain in-memory model."""

import asyncio

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import OffsetOutOfRange, StreamStorage

from .conftest import FAST

STREAMS = ["s0", "s1", "s2"]


class StorageModel(RuleBasedStateMachine):
    """The model: per stream, a list of (base, count, payload) and a start offset."""

    @initialize()
    def setup(self):
        self.loop = asyncio.new_event_loop()
        self.engine = open_engine(None, shards=3)
        self.meta = self.engine.client()
        self.objects = open_object_store("memory://")
        self.storage = None
        self.model = {name: [] for name in STREAMS}
        self.starts = {name: 0 for name in STREAMS}
        self.restart()

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def next_offset(self, name):
        entries = self.model[name]
        return entries[-1][0] + entries[-1][1] if entries else 0

    @rule()
    def restart(self):
        """A new StreamStorage instance (cold caches, new append sessions)."""
        if self.storage is not None:
            self.run(self.storage.close())
        self.storage = StreamStorage(self.meta, self.objects, options=FAST)
        self.handles = {name: self.run(self.storage.open_stream(name, create=True)) for name in STREAMS}
        for handle in self.handles.values():
            self.run(handle.refresh())

    @rule(name=st.sampled_from(STREAMS), batch=st.lists(st.tuples(st.integers(1, 5), st.binary(min_size=1, max_size=64)),
                                                         min_size=1, max_size=6))
    def append(self, name, batch):
        handle = self.handles[name]

        async def go():
            return await asyncio.gather(*(handle.append(p, c) for c, p in batch))

        results = self.run(go())
        for (count, payload), result in zip(batch, results):
            assert result.base_offset == self.next_offset(name)
            self.model[name].append((result.base_offset, count, payload))

    @rule(name=st.sampled_from(STREAMS), data=st.data())
    def fetch(self, name, data):
        end = self.next_offset(name)
        start = data.draw(st.integers(self.starts[name], end))
        max_bytes = data.draw(st.integers(1, 300))
        result = self.run(self.handles[name].fetch(start, max_bytes=max_bytes))
        expected = [(b, c, p) for b, c, p in self.model[name] if b + c > start]
        got = [(e.base_offset, e.record_count, bytes(e.data)) for e in result.entries]
        assert got == expected[: len(got)]
        assert (len(got) >= 1) == (start < end)

    @rule(name=st.sampled_from(STREAMS), data=st.data())
    def fetch_trimmed(self, name, data):
        if self.starts[name] == 0:
            return
        offset = data.draw(st.integers(0, self.starts[name] - 1))
        try:
            self.run(self.handles[name].fetch(offset))
        except OffsetOutOfRange:
            return
        raise AssertionError("a trimmed offset was served")

    @precondition(lambda self: any(self.model.values()))
    @rule(name=st.sampled_from(STREAMS), data=st.data())
    def trim(self, name, data):
        new_start = data.draw(st.integers(0, self.next_offset(name)))
        self.run(self.handles[name].trim(new_start))
        self.starts[name] = max(self.starts[name], new_start)

    @invariant()
    def offsets_agree(self):
        if getattr(self, "storage", None) is None:
            return
        for name, handle in self.handles.items():
            assert handle.next_offset() == self.next_offset(name)

    def teardown(self):
        if getattr(self, "storage", None) is not None:
            self.run(self.storage.close())
            self.run(self.meta.close())
            self.run(self.engine.close())
        self.loop.close()


TestStorageModel = StorageModel.TestCase
TestStorageModel.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
