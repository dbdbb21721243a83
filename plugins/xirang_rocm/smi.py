"""Read AMD GPUs through ``rocm-smi --json`` (no Python library needed).

rocm-smi keys each GPU as ``card<N>`` and has renamed fields across releases (``Card series`` and
``Card Series``), so fields are looked up under every spelling known.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from xirang.devices import DeviceReading, NodeReading, Sensor, parse_float, parse_int

QUERY = (
    "rocm-smi",
    "--showproductname",
    "--showmeminfo",
    "vram",
    "--showbus",
    "--showtemp",
    "--showuniqueid",
    "--showdriverversion",
    "--json",
)
MODEL_KEYS = ("Card Series", "Card series", "Card SKU", "Card Model")
TEMPERATURE_KEYS = (
    "Temperature (Sensor junction) (C)",
    "Temperature (Sensor edge) (C)",
)
#: rocm-smi's sensor keys, as the health rules name the sensors
SENSOR_KEYS = {
    "edge": "Temperature (Sensor edge) (C)",
    "junction": "Temperature (Sensor junction) (C)",
    "memory": "Temperature (Sensor memory) (C)",
}
_CARD = re.compile(r"^card:?(\d+)$")


def read(stdout: str, error: str = "") -> NodeReading:
    """The node as ``rocm-smi --json`` reports it; ``error`` explains an empty answer."""
    data = _json_object(stdout)
    if data is None:
        return NodeReading("rocm-smi", problem=error or "rocm-smi printed no JSON")
    devices = tuple(
        parse_card(int(m[1]), fields)
        for key, fields in sorted(data.items(), key=lambda item: _card_number(item[0]))
        if (m := _CARD.match(key)) and isinstance(fields, dict)
    )
    system = data.get("system") or {}
    return NodeReading(
        "rocm-smi",
        devices,
        driver=str(system.get("Driver version", "")),
        problem="" if devices else "rocm-smi listed no GPUs",
    )


def parse_card(index: int, fields: Mapping[str, Any]) -> DeviceReading:
    model = next((str(fields[k]) for k in MODEL_KEYS if fields.get(k)), "AMD GPU")
    temperature = next((parse_float(str(fields[k])) for k in TEMPERATURE_KEYS if k in fields), None)
    return DeviceReading(
        index=index,
        model=model,
        memory_bytes=parse_int(str(fields.get("VRAM Total Memory (B)", ""))) or 0,
        pci_bus_id=str(fields.get("PCI Bus", "")),
        uuid=str(fields.get("Unique ID", "")),
        temperature_c=temperature,
        extra={"gfx": str(fields["GFX Version"])} if fields.get("GFX Version") else {},
        sensors=tuple(
            Sensor(name, value)
            for name, key in SENSOR_KEYS.items()
            if (value := parse_float(str(fields.get(key, "")))) is not None
        ),
    )


def _json_object(stdout: str) -> dict[str, Any] | None:
    """rocm-smi may print warnings before its JSON; parse from the first brace."""
    start = stdout.find("{")
    if start < 0:
        return None
    try:
        data = json.loads(stdout[start:])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _card_number(key: str) -> int:
    match = _CARD.match(key)
    return int(match[1]) if match else -1
