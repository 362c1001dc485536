"""An HTML page with an SVG drawing of a placed op graph: one box per op, coloured by device,
laid out in layers by depth (longest path from an input), edges that cross devices drawn red.

``html(plan)`` takes the JSON a plan writes (``Plan.to_json``): ``nodes`` (name, op, device,
seconds), ``edges`` (from, to, bytes, seconds) and ``devices``. No JavaScript, no external
files: the page opens anywhere; hovering a box shows its op, device and predicted time.
"""

from __future__ import annotations

import html as _html

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"]
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 132, 30, 16, 44, 20


def _layers(nodes: list[dict], edges: list[dict]) -> list[list[int]]:
    index = {n["name"]: i for i, n in enumerate(nodes)}
    depth = [0] * len(nodes)
    preds: dict[int, list[int]] = {}
    for e in edges:
        preds.setdefault(index[e["to"]], []).append(index[e["from"]])
    for i in range(len(nodes)):  # nodes are in topological order
        depth[i] = max((depth[p] + 1 for p in preds.get(i, [])), default=0)
    layers: list[list[int]] = [[] for _ in range(max(depth, default=-1) + 1)]
    for i, d in enumerate(depth):
        layers[d].append(i)
    return layers


def svg(plan: dict) -> str:
    nodes, edges = plan["nodes"], plan.get("edges", [])
    colours = {d["name"]: PALETTE[k % len(PALETTE)] for k, d in enumerate(plan["devices"])}
    layers = _layers(nodes, edges)
    width = MARGIN * 2 + max((len(layer) for layer in layers), default=1) * (BOX_W + GAP_X)
    height = MARGIN * 2 + len(layers) * (BOX_H + GAP_Y) + 30
    pos = {}
    for row, layer in enumerate(layers):
        for col, i in enumerate(layer):
            pos[nodes[i]["name"]] = (MARGIN + col * (BOX_W + GAP_X), MARGIN + 30 + row * (BOX_H + GAP_Y))
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
              f'font-family="sans-serif" font-size="11">')]
    x = MARGIN
    for name, colour in colours.items():  # legend
        parts.append(f'<rect x="{x}" y="{MARGIN - 6}" width="12" height="12" fill="{colour}"/>'
                     f'<text x="{x + 16}" y="{MARGIN + 4}">{_html.escape(name)}</text>')
        x += 30 + 8 * len(name)
    device = {n["name"]: n["device"] for n in nodes}
    for e in edges:
        (x1, y1), (x2, y2) = pos[e["from"]], pos[e["to"]]
        cross = device[e["from"]] != device[e["to"]]
        parts.append(f'<line x1="{x1 + BOX_W / 2}" y1="{y1 + BOX_H}" x2="{x2 + BOX_W / 2}" y2="{y2}" '
                     f'stroke="{"#d62728" if cross else "#999"}" stroke-width="{2 if cross else 1}">'
                     + (f'<title>{e["bytes"]:,} bytes, {e["seconds"] * 1e6:.1f} us</title>' if cross else "")
                     + "</line>")
    for n in nodes:
        x, y = pos[n["name"]]
        label = n["op"].removeprefix("relax.").removeprefix("nn.")
        tip = f'{n["name"]}: {n["op"]} on {n["device"]}, {n.get("seconds", 0) * 1e6:.1f} us ({n.get("source", "")})'
        parts.append(f'<g><title>{_html.escape(tip)}</title><rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" '
                     f'rx="4" fill="{colours.get(n["device"], "#ccc")}"/><text x="{x + 6}" y="{y + 19}" '
                     f'fill="white">{_html.escape(label[:20])}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)


def html(plan: dict) -> str:
    rows = "".join(f"<tr><td>{_html.escape(d['name'])}</td><td>{_html.escape(d.get('spec', ''))}</td>"
                   f"<td>{d.get('ops', 0)}</td><td>{d.get('busy_seconds', 0) * 1e3:.3f}</td></tr>"
                   for d in plan["devices"])
    title = _html.escape(f"{plan.get('model', 'model')}: placement by {plan.get('solver', '?')}")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 8px}}</style>
</head><body>
<h2>{title}</h2>
<p>Predicted {plan.get('objective', 'latency')}: {plan.get('predicted_seconds', 0) * 1e3:.3f} ms
({_html.escape(str(plan.get('status', '')))}). Times are model predictions (see each box's source), not measurements.</p>
<table><tr><th>device</th><th>spec</th><th>ops</th><th>busy ms</th></tr>{rows}</table>
{svg(plan)}
</body></html>
"""
