"""The agent harness: scenarios, simulated model versions, execution with limits and gates."""
