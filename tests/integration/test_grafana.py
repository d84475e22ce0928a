"""examples/grafana/sluice.json against the real binary: every metric a panel or a template
variable queries is exposed by /metrics (memory store or Redis store), and /metrics is valid
Prometheus text."""
import json
import math
import os
import re
import unittest

import harness
from test_redis import RedisServer, redis_yaml

DASHBOARD = os.path.join(harness.SOURCE_DIR, "examples", "grafana", "sluice.json")

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 1, window: 1m, alert_at: [100] }
keys:
  - { key: grafana-test-key-0123, subject: alice, plan: free }
"""

# PromQL words that are neither metrics nor functions (functions are recognised by their "(").
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan", "atan2"}
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"


def metric_names(expr):
    """The metric names `expr` (PromQL, or a Grafana template query) refers to."""
    # label_values(metric, label): the label is no metric.
    expr = re.sub(rf"label_values\(\s*({NAME})\s*,\s*{NAME}\s*\)", r"\1", expr)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)                      # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)                     # ranges and subqueries
    expr = re.sub(r"\$\{[^}]*\}|\$\w+", "", expr)              # Grafana variables
    # Label lists of aggregations and vector matching.
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for m in re.finditer(rf"(?<![\w.:]){NAME}", expr):
        word = m.group(0)
        rest = expr[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue  # a function call, or a keyword
        names.add(word)
    return names


def dashboard_queries(doc):
    """(where, query) for every panel target (rows' nested panels too) and template query."""
    out = []

    def visit(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"panel {p.get('title')!r} target {t.get('refId')}", t["expr"]))
            visit(p.get("panels", []))
    visit(doc.get("panels", []))
    for v in doc.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if q:
            out.append((f"variable {v.get('name')!r}", q))
        if v.get("definition"):
            out.append((f"variable {v.get('name')!r} definition", v["definition"]))
    return out


SAMPLE = re.compile(rf"^({NAME})(\{{(.*)\}})? (\S+)$")
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)')


def parse_labels(text):
    labels, pos = {}, 0
    while pos < len(text):
        m = LABEL.match(text, pos)
        if not m:
            raise AssertionError(f"bad label set {{{text}}}")
        labels[m.group(1)] = m.group(2)
        pos = m.end()
    return labels


def parse_exposition(text):
    """Checks `text` is Prometheus text format 0.0.4 as sluice writes it (HELP and TYPE before
    each family's samples, every sample of a declared family, histograms consistent) and returns
    {family name: type}."""
    types, helped, series = {}, set(), {}
    buckets = {}
    for number, line in enumerate(text.splitlines(), 1):
        where = f"line {number}: {line!r}"
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert re.fullmatch(NAME, name), where
            assert name not in helped, f"{where}: a second HELP"
            helped.add(name)
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            assert len(parts) == 4, where
            name, kind = parts[2], parts[3]
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), where
            assert name not in types, f"{where}: a second TYPE"
            assert name in helped, f"{where}: TYPE before HELP"
            types[name] = kind
            continue
        assert not line.startswith("#"), where
        assert line, f"line {number}: empty"
        m = SAMPLE.match(line)
        assert m, where
        name, labels, value = m.group(1), parse_labels(m.group(3) or ""), m.group(4)
        v = float(value)  # raises on a bad number
        family, suffix = name, ""
        for s in ("_bucket", "_sum", "_count"):
            if name.endswith(s) and types.get(name[:-len(s)]) == "histogram":
                family, suffix = name[:-len(s)], s
        assert family in types, f"{where}: no TYPE for {family}"
        key = (name, tuple(sorted(labels.items())))
        assert key not in series, f"{where}: repeated series"
        series[key] = v
        if types[family] == "counter":
            assert v >= 0 and not math.isnan(v), where
        if types[family] == "histogram":
            assert suffix, f"{where}: a histogram sample must be _bucket, _sum or _count"
            if suffix == "_bucket":
                le = labels.pop("le")
                buckets.setdefault((family, tuple(sorted(labels.items()))), []).append(
                    (float(le), v))
    for (family, labels), bs in buckets.items():
        bounds = [b for b, _ in bs]
        assert bounds == sorted(bounds) and bounds[-1] == math.inf, (family, labels)
        counts = [c for _, c in bs]
        assert counts == sorted(counts), f"{family}{labels}: buckets not cumulative"
        count = series.get((f"{family}_count", labels))
        assert count == counts[-1], f"{family}{labels}: +Inf bucket != _count"
    return types


def exposed_names(types):
    """Every name a query may use for the families in `types`."""
    names = set(types)
    for name, kind in types.items():
        if kind == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


class QueryParsing(unittest.TestCase):
    def test_functions_keywords_labels_and_variables_are_not_metrics(self):
        expr = ('histogram_quantile(0.99, sum by (le, command) (rate('
                'sluice_redis_request_duration_seconds_bucket{instance=~"$instance", '
                'command!="reset"}[$__rate_interval]))) / on (instance) group_left '
                'max without (job) (process_max_fds offset 5m) and time() - '
                'process_start_time_seconds')
        self.assertEqual(metric_names(expr),
                         {"sluice_redis_request_duration_seconds_bucket", "process_max_fds",
                          "process_start_time_seconds"})

    def test_a_template_query_names_its_metric_not_its_label(self):
        self.assertEqual(metric_names("label_values(sluice_build_info, instance)"),
                         {"sluice_build_info"})

    def test_a_histogram_suffix_is_accepted_only_for_a_histogram(self):
        names = exposed_names({"sluice_decision_duration_seconds": "histogram",
                               "sluice_decisions_total": "counter"})
        self.assertIn("sluice_decision_duration_seconds_bucket", names)
        self.assertNotIn("sluice_decisions_total_count", names)

    def test_the_exposition_check_refuses_a_sample_without_a_type(self):
        with self.assertRaisesRegex(AssertionError, "no TYPE"):
            parse_exposition("# HELP a A.\n# TYPE a counter\na 1\nb 2\n")


class DashboardMetricsAreExposed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD) as f:
            cls.doc = json.load(f)
        cls.texts = {}
        redis = RedisServer().start()
        try:
            for store, yaml in (("memory", ""), ("redis", redis_yaml(redis.port))):
                with harness.tempdir() as d, harness.Service(PLANS + yaml, d) as svc:
                    # A denial, so that families filled on first use (limit denials,
                    # round trips) have samples as well as a TYPE line.
                    for _ in range(2):
                        svc.request("GET", "/v1/authorize",
                                    headers={"X-API-Key": "grafana-test-key-0123"})
                    status, _, body = svc.request(
                        "GET", "/metrics", admin=True,
                        headers={"Authorization": f"Bearer {svc.admin_token}"})
                    assert status == 200, status
                    cls.texts[store] = body.decode()
        finally:
            redis.close()

    def test_metrics_are_valid_prometheus_text_for_both_stores(self):
        for store, text in self.texts.items():
            with self.subTest(store=store):
                self.assertIn("sluice_decisions_total", parse_exposition(text))

    def test_every_queried_metric_is_exposed(self):
        exposed = set()
        for text in self.texts.values():
            exposed |= exposed_names(parse_exposition(text))
        queries = dashboard_queries(self.doc)
        self.assertGreater(len(queries), 30)
        missing = []
        seen = set()
        for where, q in queries:
            names = metric_names(q)
            self.assertTrue(names, f"{where}: no metric in {q!r}")
            seen |= names
            missing += [f"{where}: {n}" for n in sorted(names - exposed)]
        self.assertEqual(missing, [])
        # The dashboard covers what the operator needs most.
        for name in ("sluice_limit_denials_total", "sluice_redis_request_duration_seconds_bucket",
                     "sluice_alert_sink_duration_seconds_bucket", "sluice_build_info",
                     "sluice_config_last_reload_successful", "process_resident_memory_bytes"):
            self.assertIn(name, seen)

    def test_redis_round_trips_have_samples_with_the_redis_store(self):
        self.assertRegex(self.texts["redis"],
                         r'sluice_redis_request_duration_seconds_count\{command="decide"\} [1-9]')
        self.assertIn("# TYPE sluice_redis_request_duration_seconds histogram",
                      self.texts["memory"])

    def test_denials_are_counted_by_limit(self):
        for store, text in self.texts.items():
            with self.subTest(store=store):
                self.assertIn('sluice_limit_denials_total{plan="free",limit="per_minute"} 1',
                              text)

    def test_every_panel_uses_the_datasource_input(self):
        inputs = [i["name"] for i in self.doc.get("__inputs", [])]
        self.assertIn("DS_PROMETHEUS", inputs)

        def visit(panels):
            for p in panels:
                if p.get("type") != "row":
                    self.assertEqual(p["datasource"]["uid"], "${DS_PROMETHEUS}", p["title"])
                    for t in p.get("targets", []):
                        self.assertEqual(t["datasource"]["uid"], "${DS_PROMETHEUS}", p["title"])
                visit(p.get("panels", []))
        visit(self.doc["panels"])
        ids = []

        def collect(panels):
            for p in panels:
                ids.append(p["id"])
                collect(p.get("panels", []))
        collect(self.doc["panels"])
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")


if __name__ == "__main__":
    unittest.main()
