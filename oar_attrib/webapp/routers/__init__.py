"""One router per resource: runs, traces, report, live attribution, static assets."""
