"""A dependency-free SVG of throughput and p99 against offered load (bench/run's plot)."""
import math
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def _nice_ticks(lo, hi, n=5):
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw), default=raw)
    t = math.ceil(lo / step) * step
    out = []
    while t <= hi + step * 1e-9:
        out.append(t)
        t += step
    return out


def _fmt(v):
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def _panel(x0, y0, w, h, title, xlabel, ylabel, series, log_y=False, diagonal=False):
    """series: [(name, [(x, y), ...])]. Returns SVG elements for one panel."""
    xs = [x for _, pts in series for x, _ in pts] or [0, 1]
    ys = [y for _, pts in series for _, y in pts if y > 0] or [1]
    xmax = max(xs) * 1.05
    if log_y:
        ylo = 10 ** math.floor(math.log10(min(ys)))
        yhi = 10 ** math.ceil(math.log10(max(ys)))
        if yhi <= ylo:
            yhi = ylo * 10
        fy = lambda y: y0 + h - h * (math.log10(max(y, ylo)) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo))
        yticks = [ylo * 10 ** k for k in range(int(round(math.log10(yhi / ylo))) + 1)]
    else:
        yhi = max(max(ys), max(xs) if diagonal else 0) * 1.05
        fy = lambda y: y0 + h - h * y / yhi
        yticks = _nice_ticks(0, yhi)
    fx = lambda x: x0 + w * x / xmax
    e = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#888"/>',
         f'<text x="{x0 + w / 2}" y="{y0 - 10}" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
         f'<text x="{x0 + w / 2}" y="{y0 + h + 38}" text-anchor="middle">{escape(xlabel)}</text>',
         f'<text x="{x0 - 52}" y="{y0 + h / 2}" text-anchor="middle" transform="rotate(-90 {x0 - 52} {y0 + h / 2})">{escape(ylabel)}</text>']
    for t in _nice_ticks(0, xmax):
        X = fx(t)
        e.append(f'<line x1="{X:.1f}" y1="{y0 + h}" x2="{X:.1f}" y2="{y0 + h + 5}" stroke="#888"/>')
        e.append(f'<text x="{X:.1f}" y="{y0 + h + 18}" text-anchor="middle" font-size="11">{_fmt(t)}</text>')
    for t in yticks:
        Y = fy(t)
        e.append(f'<line x1="{x0}" y1="{Y:.1f}" x2="{x0 + w}" y2="{Y:.1f}" stroke="#eee"/>')
        e.append(f'<text x="{x0 - 6}" y="{Y + 4:.1f}" text-anchor="end" font-size="11">{_fmt(t)}</text>')
    if diagonal:
        top = min(xmax, yhi)
        e.append(f'<line x1="{fx(0):.1f}" y1="{fy(0):.1f}" x2="{fx(top):.1f}" y2="{fy(top):.1f}" '
                 'stroke="#aaa" stroke-dasharray="4 4"/>')
    for i, (name, pts) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        pts = sorted(p for p in pts if p[1] > 0 or not log_y)
        path = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in pts)
        e.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in pts:
            e.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{c}"/>')
        e.append(f'<rect x="{x0 + 10}" y="{y0 + 10 + 18 * i}" width="12" height="12" fill="{c}"/>')
        e.append(f'<text x="{x0 + 28}" y="{y0 + 21 + 18 * i}" font-size="12">{escape(name)}</text>')
    return e


def write_svg(path, title, throughput_series, p99_series, note=""):
    W, H = 980, 420
    e = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         'font-family="sans-serif" font-size="13">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>']
    e += _panel(80, 60, 360, 290, "achieved throughput", "offered load (req/s)", "req/s",
                throughput_series, diagonal=True)
    e += _panel(580, 60, 360, 290, "p99 latency (log scale)", "offered load (req/s)", "ms",
                p99_series, log_y=True)
    if note:
        e.append(f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle" font-size="11" fill="#555">{escape(note)}</text>')
    e.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(e) + "\n")
