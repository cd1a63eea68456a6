"""Short fuzz runs of the sans-io parsers: hostile bytes raise the parser's own error, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from .targets import CODEC_TARGETS


@pytest.mark.parametrize("target", CODEC_TARGETS, ids=lambda t: t.name)
def test_hostile_input_fails_only_with_the_documented_error(target):
    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(target.inputs)
    def run(data):
        target.check(data)

    run()
