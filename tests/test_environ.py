"""The per-call environment reader answers as ``os.environ.get`` does, change after change."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from otel_agentguard import _environ, config
from otel_agentguard.environment_variables import OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT

NAME = "OTEL_AGENTGUARD_TEST_SETTING"


@pytest.mark.parametrize("layout", [_environ._LAYOUT, None], ids=["direct", "public"])
def test_a_reader_follows_every_change_made_through_os_environ(layout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)
    read = _environ.reader(NAME, layout)
    assert read() == ""
    monkeypatch.setenv(NAME, "first")
    assert read() == "first"
    os.environ[NAME] = "ünïcode \udcff"  # a value the OS could only hand over as undecodable bytes
    assert read() == os.environ[NAME]
    del os.environ[NAME]
    assert read() == ""
    os.environ.update({NAME: "again"})
    assert read() == "again"
    os.environ.pop(NAME)
    assert read() == ""


def test_the_direct_reader_is_used_when_the_layout_is_known_and_refused_when_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert _environ._LAYOUT is not None  # CPython keeps os.environ as checked
    monkeypatch.setattr(os, "environ", dict(os.environ))  # an environ without the layout
    assert _environ._direct_layout() is None


def test_capture_content_reads_the_environment_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, raising=False)
    assert config.capture_content() is False
    monkeypatch.setenv(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, " SPAN_ONLY ")
    assert config.capture_content() is True
    monkeypatch.setenv(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "false")
    assert config.capture_content() is False


def test_a_replaced_os_environ_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, raising=False)
    with mock.patch("os.environ", {OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: "true"}):
        assert _environ.reader(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)() == "true"
        assert config.capture_content() is True
    assert config.capture_content() is False
