"""The broker's own ``public`` and ``public/default`` yield to an explicit creation until changed."""

import json

import pytest

from nereus.ledger.policies import (ensure_default_namespace, policies_key, replace_untouched_default,
                                    tenant_key)


@pytest.fixture
def meta(memory_meta):
    return memory_meta


async def _value(meta, key: str) -> dict:
    return json.loads((await meta.get(key)).value)


async def test_an_untouched_default_is_replaced_once(meta):
    await ensure_default_namespace(meta, "east")
    await ensure_default_namespace(meta, "east")  # a second broker's start changes nothing
    mine = json.dumps({"adminRoles": ["anonymous"], "allowedClusters": ["east"]}).encode()
    assert await replace_untouched_default(meta, tenant_key("public"), mine)
    assert (await _value(meta, tenant_key("public")))["adminRoles"] == ["anonymous"]
    # Now it is the operator's: a second creation is a conflict for the caller to report.
    assert not await replace_untouched_default(meta, tenant_key("public"), b"{}")
    assert (await _value(meta, tenant_key("public")))["adminRoles"] == ["anonymous"]
    # The namespace is a default of its own.
    assert await replace_untouched_default(meta, policies_key("public", "default"), b'{"x": 1}')
    assert await _value(meta, policies_key("public", "default")) == {"x": 1}


async def test_a_changed_default_or_another_record_is_not_replaced(meta):
    await ensure_default_namespace(meta, "east")
    await meta.put(policies_key("public", "default"), b'{"deduplicationEnabled": true}')  # changed by someone
    assert not await replace_untouched_default(meta, policies_key("public", "default"), b"{}")
    assert await _value(meta, policies_key("public", "default")) == {"deduplicationEnabled": True}
    await meta.put(tenant_key("acme"), b"{}")
    assert not await replace_untouched_default(meta, tenant_key("acme"), b'{"adminRoles": ["x"]}')
    assert not await replace_untouched_default(meta, tenant_key("absent"), b"{}")


async def test_defaults_made_by_someone_else_first_are_not_defaults(meta):
    await meta.put(tenant_key("public"), b'{"adminRoles": ["ops"], "allowedClusters": ["east"]}')
    await ensure_default_namespace(meta, "east")
    assert not await replace_untouched_default(meta, tenant_key("public"), b"{}")
    assert (await _value(meta, tenant_key("public")))["adminRoles"] == ["ops"]
