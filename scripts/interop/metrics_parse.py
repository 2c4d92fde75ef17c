"""Parses a scrape of aml-mcp-gate's /metrics with the official Python client's parsers.

Usage: metrics_parse.py FILE. Prints one JSON object: every sample, as the Prometheus text
parser (prometheus_client.parser) reads it; each family's type, as the OpenMetrics parser
(prometheus_client.openmetrics.parser, the format the gate serves) reads it; and whether the
two parsers read the same samples. Exits non-zero (with the parser's error) if either parser
refuses the text. (The text parser files a counter's `_total` samples under a family of their
own: OpenMetrics names the family without the suffix, the older format with it.)
"""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families


def samples(families):
    out = {}
    for family in families:
        entry = out.setdefault(family.name, {"type": family.type, "samples": []})
        for sample in family.samples:
            entry["samples"].append({"name": sample.name, "labels": dict(sample.labels), "value": sample.value})
    return out


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    prometheus = samples(text_string_to_metric_families(text))
    openmetrics = samples(openmetrics_families(text))

    def flat(parsed):
        return sorted(
            (s["name"], sorted(s["labels"].items()), s["value"])
            for family in parsed.values()
            for s in family["samples"]
            # OpenMetrics adds _created samples the text format has no notion of.
            if not s["name"].endswith("_created")
        )

    json.dump(
        {
            "samples": [s for family in prometheus.values() for s in family["samples"]],
            "types": {name: family["type"] for name, family in openmetrics.items()},
            "parsers_agree": flat(prometheus) == flat(openmetrics),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
