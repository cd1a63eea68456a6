"""Advertised listener settings (sans-io), their configuration keys, and broker records with and without them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nereus.broker.cluster.membership import BrokerRecord
from nereus.broker.config_file import BROKER, parse_properties, resolve
from nereus.broker.listeners import AdvertisedListener, ListenerError, parse_bind_addresses, parse_listeners
from nereus.topics import BrokerAddress, UnknownListener


def test_listeners_parse_with_the_first_as_internal():
    listeners, internal = parse_listeners(" internal:pulsar://10.0.0.5:6650 , external:pulsar://b.example:6651,"
                                          "external:http://b.example:8081")
    assert internal == "internal"
    assert listeners == (AdvertisedListener("internal", "pulsar://10.0.0.5:6650"),
                         AdvertisedListener("external", "pulsar://b.example:6651", "http://b.example:8081"))
    assert (listeners[1].host, listeners[1].port) == ("b.example", 6651)
    assert parse_listeners("a:pulsar://h:1,b:pulsar://h:2", "b")[1] == "b"


@pytest.mark.parametrize("text, internal, error", [
    ("pulsar://h:1", None, "name:pulsar://host:port"),
    ("a:pulsar://h:1", "b", "internal listener 'b'"),
    ("a:pulsar://h:1,b:pulsar://h:1", None, "two listeners"),
    ("a:pulsar://h:1,a:pulsar://h:2", None, "more than one pulsar://"),
    ("a:http://h:1", None, "no pulsar://"),
    ("a:pulsar+ssl://h:6651", None, "internal listener 'a' has no pulsar://"),
    ("a:pulsar://h:1,b:https://h:2", None, "'b' has no pulsar://host:port nor pulsar\\+ssl"),
    ("a:pulsar://h:1,a:pulsar+ssl://h:2,a:pulsar+ssl://h:3", None, "more than one pulsar\\+ssl://"),
    ("a:pulsar://h", None, "pulsar://host:port"),
    ("a:kafka://h:1", None, "must be a pulsar://, pulsar\\+ssl://, http:// or https://"),
    ("", None, "no listener"),
])
def test_bad_listener_settings_say_what_is_wrong(text, internal, error):
    with pytest.raises(ListenerError, match=error):
        parse_listeners(text, internal)


def test_listeners_with_tls_urls():
    listeners, internal = parse_listeners("internal:pulsar://10.0.0.5:6650,external:pulsar+ssl://b.example:6651,"
                                          "external:https://b.example:8443,both:pulsar://c:1,both:pulsar+ssl://c:2")
    assert internal == "internal"
    assert listeners[1] == AdvertisedListener("external", "", "", "pulsar+ssl://b.example:6651",
                                              "https://b.example:8443")
    assert (listeners[1].host, listeners[1].port) == ("b.example", 6651)
    assert listeners[0].as_tuple() == ("internal", "pulsar://10.0.0.5:6650", "")  # as older records have it
    address = BrokerAddress("b", 1, "", "pulsar://10.0.0.5:6650", "10.0.0.5", 9092, "http://10.0.0.5:8080",
                            tuple(li.as_tuple() for li in listeners), pulsar_tls_url="pulsar+ssl://10.0.0.5:6651")
    assert address.urls_for("external") == ("", "http://10.0.0.5:8080")
    assert address.tls_urls_for("external") == ("pulsar+ssl://b.example:6651", "https://b.example:8443")
    assert address.tls_urls_for("both") == ("pulsar+ssl://c:2", "")
    assert address.tls_urls_for("internal") == ("", "")
    assert address.tls_urls_for(None) == ("pulsar+ssl://10.0.0.5:6651", "")
    stored = BrokerRecord.decode(BrokerRecord(address, 1).encode()).address
    assert stored == address


def test_bind_addresses_name_advertised_listeners():
    listeners, _ = parse_listeners("internal:pulsar://h:6650,external:pulsar://e:6651")
    assert parse_bind_addresses("external:pulsar://0.0.0.0:6651", listeners) == (("external", "0.0.0.0", 6651),)
    with pytest.raises(ListenerError, match="names no advertised listener"):
        parse_bind_addresses("other:pulsar://0.0.0.0:6652", listeners)


def test_configuration_keys_set_the_options():
    got = resolve(parse_properties("advertisedListeners=i:pulsar://h:1,e:pulsar://g:2\ninternalListenerName=i\n"
                                   "bindAddresses=e:pulsar://0.0.0.0:2\n"), BROKER)
    assert got.values == {"advertised_listeners": "i:pulsar://h:1,e:pulsar://g:2", "internal_listener_name": "i",
                          "bind_addresses": "e:pulsar://0.0.0.0:2"}
    assert not got.ignored


def test_a_bad_flag_is_a_usage_error_before_anything_starts(tmp_path):
    result = subprocess.run([sys.executable, "-m", "nereus.cli", "standalone", "--data-dir", str(tmp_path),
                             "--advertised-listeners", "internal:pulsar://h:1", "--advertised-address", "x"],
                            capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and b"cannot be used together" in result.stderr


def test_broker_records_with_and_without_listeners():
    address = BrokerAddress("b1", 1, "z", "pulsar://h:1", "h", 9092, "http://h:8080",
                            (("internal", "pulsar://h:1", ""), ("external", "pulsar://e:2", "http://e:3")))
    record = BrokerRecord(address, "inc")
    decoded = BrokerRecord.decode(record.encode())
    assert decoded.address == address
    assert decoded.address.urls_for("external") == ("pulsar://e:2", "http://e:3")
    assert decoded.address.urls_for("internal") == ("pulsar://h:1", "http://h:8080")
    assert decoded.address.urls_for(None) == ("pulsar://h:1", "http://h:8080")
    with pytest.raises(UnknownListener, match="do not have other listener"):
        decoded.address.urls_for("other")

    # A broker that predates listeners wrote no such field; one from a later version may write more.
    value = json.loads(record.encode())
    del value["address"]["listeners"]
    older = BrokerRecord.decode(json.dumps(value).encode()).address
    assert older.listeners == () and older.urls_for(None) == ("pulsar://h:1", "http://h:8080")
    value["address"]["some_later_field"] = 1
    assert BrokerRecord.decode(json.dumps(value).encode()).address == older
