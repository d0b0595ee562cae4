"""Replay recorded sessions through the live judge: readers, runner and CLI."""

from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.recorded import Expectation, RecordedSession
from otel_agentguard.replay.runner import judge_recorded, replay_files
from otel_agentguard.replay.sources import read_files

__all__ = ["Expectation", "InputError", "RecordedSession", "judge_recorded", "read_files", "replay_files"]
