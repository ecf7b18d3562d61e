"""Commands that take in traces from elsewhere: OTLP, Inspect AI logs, portable JSONL."""
