"""OTLP/HTTP trace ingest: decode spans, map GenAI semantics to runs, stage, assemble, serve."""
