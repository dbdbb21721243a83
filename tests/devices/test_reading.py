"""Bus ids from different tools compare equal; tool placeholders read as missing values."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xirang.devices.reading import bus_key, parse_float, parse_int

hex_byte = st.integers(0, 255)


@given(st.integers(0, 0xFFFF), hex_byte, st.integers(0, 31))
def test_every_spelling_of_a_bus_id_has_one_key(domain: int, bus: int, dev: int) -> None:
    smi = f"{domain:08X}:{bus:02X}:{dev:02X}.0"  # nvidia-smi
    kernel = f"PCI:{domain:04x}:{bus:02x}:{dev:02x}"  # NVRM: Xid (PCI:...)
    sysfs = f"{domain:04x}:{bus:02x}:{dev:02x}.0"
    assert bus_key(smi) == bus_key(kernel) == bus_key(sysfs)


def test_placeholders_are_none_and_units_are_ignored() -> None:
    assert parse_int("[N/A]") is None
    assert parse_int("[Not Supported]") is None
    assert parse_int(" 81559 ") == 81559
    assert parse_float("45.0°C") == 45.0
    assert parse_float("") is None
