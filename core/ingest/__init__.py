"""Getting events in from outside: JSONL files today; OTLP and Inspect AI logs later."""
