"""Link matrices parse the same from every vendor's layout, and groups nest fastest-first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xirang.devices.linkmatrix import build_topology, parse_link_table

TIERS = (("nvlink", lambda c: c.startswith("NV")), ("pcie", lambda c: c in {"PIX", "PHB"}))


def _matrix_text(codes: list[list[str]], sep: str) -> str:
    n = len(codes)
    lines = [sep + sep.join(f"GPU{j}" for j in range(n))]
    for i in range(n):
        cells = ["X" if i == j else codes[i][j] for j in range(n)]
        lines.append(f"GPU{i}{sep}" + sep.join(cells))
    return "\n".join(lines) + "\n\nLegend:\n  X = Self\n"


def test_tab_and_space_layouts_parse_to_the_same_cells() -> None:
    codes = [["", "NV4", "SYS"], ["NV4", "", "PIX"], ["SYS", "PIX", ""]]
    tab, space = (
        parse_link_table(_matrix_text(codes, "\t")),
        parse_link_table(_matrix_text(codes, "   ")),
    )
    assert tab.cell("GPU1", "GPU2") == space.cell("GPU1", "GPU2") == "PIX"
    assert tab.indices("GPU") == space.indices("GPU") == [0, 1, 2]


def test_text_without_a_matrix_gives_no_groups() -> None:
    topology = build_topology(parse_link_table("No devices were found\n"), "GPU", TIERS)
    assert topology.groups == ()


links = st.sampled_from(["NV12", "PIX", "PHB", "SYS"])


@st.composite
def symmetric_matrices(draw: st.DrawFn) -> list[list[str]]:
    n = draw(st.integers(1, 8))
    codes = [["" for _ in range(n)] for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            codes[i][j] = codes[j][i] = draw(links)
    return codes


@given(symmetric_matrices())
def test_groups_nest_and_every_device_has_a_group(codes: list[list[str]]) -> None:
    topology = build_topology(parse_link_table(_matrix_text(codes, "\t")), "GPU", TIERS)
    n = len(codes)
    assert topology.groups[-1].link == "node"
    assert topology.groups[-1].devices == tuple(range(n))
    for device in range(n):
        assert topology.group_of(device) is not None
    by_link: dict[str, list[set[int]]] = {}
    for group in topology.groups:
        by_link.setdefault(group.link, []).append(set(group.devices))
    for sets in by_link.values():  # groups of one link class never overlap
        assert all(a.isdisjoint(b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    for fast in by_link.get("nvlink", []):  # an NVLink island lies inside one PCIe group or node
        assert any(fast <= slow for slow in by_link.get("pcie", []) + by_link["node"])


@given(symmetric_matrices())
def test_devices_in_one_nvlink_group_are_joined_by_nvlink_paths(codes: list[list[str]]) -> None:
    topology = build_topology(parse_link_table(_matrix_text(codes, "\t")), "GPU", TIERS)
    for group in (g for g in topology.groups if g.link == "nvlink"):
        members = set(group.devices)
        reached, frontier = {min(members)}, [min(members)]
        while frontier:
            a = frontier.pop()
            for b in members - reached:
                if codes[a][b].startswith("NV"):
                    reached.add(b)
                    frontier.append(b)
        assert reached == members
