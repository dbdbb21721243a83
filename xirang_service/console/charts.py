"""Line charts as inline SVG, drawn on the server from the metrics store (no script needed)."""

from __future__ import annotations

from html import escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")


def line_chart(
    title: str,
    series: dict[str, list[tuple[float, float]]],
    since: float,
    until: float,
    y_max: float | None = None,
    width: int = 560,
    height: int = 180,
) -> str:
    """An SVG chart of every series over ``[since, until]``; y from 0 to ``y_max`` (or data)."""
    pad = 32
    top = y_max or max((v for pts in series.values() for _, v in pts), default=1.0) or 1.0
    span = max(until - since, 1e-9)

    def xy(t: float, v: float) -> str:
        x = pad + (t - since) / span * (width - 2 * pad)
        y = height - pad - min(v, top) / top * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    parts = [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{pad}" y="16" font-size="13">{escape(title)}</text>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        'stroke="#999"/>',
        f'<text x="2" y="{pad + 4}" font-size="10">{top:g}</text>',
    ]
    for i, (key, points) in enumerate(sorted(series.items())):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(xy(t, v) for t, v in points)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
        parts.append(
            f'<text x="{width - pad - 90}" y="{16 + 12 * i}" font-size="10" fill="{color}">'
            f"{escape(key)}</text>"
        )
    if not series:
        middle = f'x="{width / 2 - 40}" y="{height / 2}"'
        parts.append(f'<text {middle} font-size="11">no data yet</text>')
    parts.append("</svg>")
    return "".join(parts)
