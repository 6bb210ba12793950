#!/usr/bin/python3
"""Reads a worker's /metrics and checks it as a Prometheus scraper would.

Usage: parse_metrics.py URL

Parses the body with prometheus_client's text parser (Debian's
python3-prometheus-client) and checks what the text exposition format 0.0.4
requires beyond what that parser enforces: the Content-Type, a HELP and a TYPE
line before every family's samples, each family's samples together, valid
metric and label names, counters named *_total, and histograms with
cumulative buckets that end in le="+Inf" equal to _count.

Prints one line per sample: name, the labels sorted by name (key=value), and
the value, separated by ASCII unit separators (0x1f; labels are separated by
0x1e). Exits 1 with the problem on standard error when the text is not valid.
"""

import re
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def fail(message):
    print("parse_metrics: " + message, file=sys.stderr)
    sys.exit(1)


def check_layout(text):
    """HELP and TYPE first, then the family's samples, never split."""
    declared = {}
    finished = set()
    current = None
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            family = parts[2]
            if family in finished:
                fail("family %s declared twice" % family)
            if current is not None and current != family:
                finished.add(current)
            current = family
            declared.setdefault(family, set()).add(parts[1])
            if parts[1] == "TYPE" and parts[3] not in (
                    "counter", "gauge", "histogram", "summary", "untyped"):
                fail("unknown type in: " + line)
            continue
        if line.startswith("#"):
            continue
        name = re.split(r"[{ ]", line, 1)[0]
        family = current
        if family is None or not name.startswith(family):
            fail("sample outside its family: " + line)
        if declared[family] != {"HELP", "TYPE"}:
            fail("family %s lacks HELP or TYPE before its samples" % family)


def main():
    if len(sys.argv) != 2:
        fail("usage: parse_metrics.py URL")
    with urllib.request.urlopen(sys.argv[1], timeout=10) as response:
        content_type = response.headers.get("Content-Type", "")
        text = response.read().decode("utf-8")
    if not content_type.startswith("text/plain; version=0.0.4"):
        fail("Content-Type is %r" % content_type)
    check_layout(text)
    out = []
    for family in text_string_to_metric_families(text):
        if not NAME.match(family.name):
            fail("bad metric name %r" % family.name)
        buckets = {}
        counts = {}
        for s in family.samples:
            for key in s.labels:
                if not LABEL.match(key) or key.startswith("__"):
                    fail("bad label name %r" % key)
            if family.type == "counter" and not s.name.endswith(
                    ("_total", "_created")):
                fail("counter sample %s is not named *_total" % s.name)
            if family.type == "histogram":
                series = tuple(sorted(
                    (k, v) for k, v in s.labels.items() if k != "le"))
                if s.name.endswith("_bucket"):
                    buckets.setdefault(series, []).append(
                        (float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    counts[series] = s.value
            labels = "\x1e".join(
                "%s=%s" % (k, v) for k, v in sorted(s.labels.items()))
            out.append("%s\x1f%s\x1f%r" % (s.name, labels, s.value))
        for series, bs in buckets.items():
            bounds = [b for b, _ in bs]
            values = [v for _, v in bs]
            if bounds != sorted(bounds) or bounds[-1] != float("inf"):
                fail("%s%s: buckets out of order or without +Inf"
                     % (family.name, series))
            if values != sorted(values):
                fail("%s%s: buckets are not cumulative" % (family.name, series))
            if values[-1] != counts.get(series):
                fail("%s%s: +Inf bucket differs from _count"
                     % (family.name, series))
    print("\n".join(out))


if __name__ == "__main__":
    main()
