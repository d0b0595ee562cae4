"""Every test here starts from the plain OpenAI SDK methods.

OpenLLMetry 0.62's ``uninstrument()`` leaves its wrappers on the SDK, bound to the
test's provider after it shut down; a later test would run inside them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _plain_openai_sdk() -> Iterator[None]:
    try:
        from openai.resources.chat.completions.completions import AsyncCompletions, Completions
        from openai.resources.responses.responses import AsyncResponses, Responses
    except ImportError:
        yield
        return
    saved = [(cls, dict(vars(cls))) for cls in (Completions, AsyncCompletions, Responses, AsyncResponses)]
    yield
    for cls, attributes in saved:
        for name, value in attributes.items():
            if vars(cls).get(name) is not value:
                setattr(cls, name, value)
