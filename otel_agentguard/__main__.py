from otel_agentguard.replay.cli import run

raise SystemExit(run())
