#!/usr/bin/env python3
"""stats.py med|median VALUES... : summaries for bench/transport/run.sh."""
import statistics
import sys

mode, values = sys.argv[1], [float(x) for x in sys.argv[2:] if x.strip()]
if not values:
    print("-" if mode == "med" else "")
elif mode == "median":
    print(statistics.median(values))
else:
    text = "%.3g" % statistics.median(values)
    if len(values) > 1:
        text += " [%.3g-%.3g]" % (min(values), max(values))
    print(text)
