"""Find the action claims in a final answer, computed in process.

A claim is a statement that the agent *did* something with a side effect ("I've switched
your flight", "the fee was waived", "已帮您把地址改好了", "Done - ..."). A statement of
state, a general policy, a plan or offer, a question, a negation, a conditional, a report of
what a third party did and a dated record are not claims, and neither are read-only acts
("I checked your order"). English and Chinese are read by the shape of their clauses
(:mod:`otel_agentguard.judge.claims._rules`); any verb counts.

The policy helps in three ways: the names of its write tools and their ``claims`` words add
to the vocabulary; ``[claims.<lang>]`` regular expressions replace a language's rules or add
a language; ``[claims] classifier`` plugs in a stronger judge
(:mod:`otel_agentguard.judge.claims.classifier`).

The category found (``write``) is what ``agentguard.final.claims`` records, with the rule
and the clause position that decided it: the answer text itself need not be exported.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from otel_agentguard.judge.claims import _rules as rules
from otel_agentguard.judge.claims._language import CHINESE, ENGLISH, language_of
from otel_agentguard.judge.claims._rules import Grounds as Grounds
from otel_agentguard.judge.claims.classifier import CONFIRM, INSTEAD, ClaimClassifier
from otel_agentguard.judge.claims.model_judge import ModelJudge

WRITE = "write"
CLAIM_CATEGORIES = (WRITE,)  # what a claim can assert; fake_completion checks "write" against tool contracts
STRUCTURAL_LANGUAGES = ("en", "zh")  # read by clause structure; a policy table for them replaces that
# Languages whose built-in claims are regular expressions: none, English and Chinese are read by
# structure. A policy's ``[claims.<lang>]`` table adds to (or, for en/zh, replaces) these.
BUILTIN_PATTERNS: dict[str, dict[str, tuple[str, ...]]] = {}
PATTERN = "policy_pattern"
LANGUAGE = "language"  # why an answer was not checked
CLASSIFIER = "classifier"
MODEL_JUDGE = "model_judge"

_MAX_TEXT_CHARS = 16 * 1024  # claims open or close an answer: its head and tail are read
# Replay (and `agentguard claims`) may wait for the classifier; the live span processor never does.
_classifier_everywhere: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "agentguard_claims_classifier_everywhere", default=False)


@dataclass(frozen=True)
class ClaimVerdict:
    """What an answer claims and why: the clause and the rule that decided it."""

    categories: tuple[str, ...]
    rule: str | None = None  # the rule of the deciding clause (a claim, or why the last candidate was not)
    clause: int | None = None  # its 1-based position
    clauses: int = 0  # clauses in the answer
    findings: tuple[rules.ClauseFinding, ...] = field(default=(), repr=False)
    decided_by: str = "rules"  # "rules", "policy_pattern" or "classifier"
    checked: bool = True  # False: nothing here could read the answer (its language), so it is no verdict
    reason: str | None = None  # why it was not checked: "language"
    language: str = ENGLISH

    @property
    def is_claim(self) -> bool:
        return WRITE in self.categories

    @property
    def borderline(self) -> bool:
        """The rules decided by inference (who acted, when) rather than by what a clause says
        outright: the answers a model judge, where the policy has one, decides instead."""
        return self.decided_by == "rules" and (
            self.rule in rules.INFERRED or any(finding.rule == rules.CHANGED for finding in self.findings))


class ClaimDetector:
    """Claims of a final answer. Immutable after construction; safe to share across threads.

    ``detect(text)`` returns the sorted categories and never blocks (the classifier, if any,
    is consulted only in replay, see :func:`classifier_everywhere`); ``judge(text)`` also asks
    the classifier, with its time budget; ``explain(text)`` returns the full verdict.
    """

    __slots__ = ("_english", "_chinese", "_patterns", "_languages", "classifier", "model_judge", "vocabulary")

    def __init__(
        self,
        patterns: Mapping[str, Mapping[str, Iterable[str]]] | None = None,
        *,
        vocabulary: Iterable[str] = (),
        classifier: ClaimClassifier | None = None,
        judge: ModelJudge | None = None,
    ):
        words: set[str] = set()
        for word in vocabulary:
            words |= rules.past_forms(word)
        self.vocabulary = frozenset(words)
        patterns = patterns or {}
        self._english = None if "en" in patterns else rules.EnglishRules(self.vocabulary)
        self._chinese = None if "zh" in patterns else rules.ChineseRules(self.vocabulary)
        compiled: list[tuple[str, re.Pattern[str], re.Pattern[str]]] = []
        for lang, categories in patterns.items():
            guard = _ZH_GUARD if lang.startswith("zh") else _EN_GUARD
            for category, sources in categories.items():
                # One regex per pattern: a pattern may carry its own inline flags, like (?i).
                compiled.extend((category, re.compile(source, re.IGNORECASE), guard) for source in sources)
        self._patterns = tuple(compiled)
        self._languages = tuple(patterns)
        self.classifier = classifier
        self.model_judge = judge  # for answers the rules cannot read or decide by inference; off the agent's path

    def detect(self, text: str, grounds: Grounds | None = None) -> tuple[str, ...]:
        return self.verdict(text, grounds).categories

    def verdict(self, text: str, grounds: Grounds | None = None) -> ClaimVerdict:
        """:meth:`explain`, with the classifier and the model judge only where they may block
        (see :func:`classifier_everywhere`)."""
        everywhere = _classifier_everywhere.get()
        return self.explain(text, use_classifier=everywhere, use_judge=everywhere, grounds=grounds)

    def judge(self, text: str) -> tuple[str, ...]:
        return self.explain(text, use_classifier=True).categories

    def explain(self, text: str, *, use_classifier: bool = False, use_judge: bool = False,
                grounds: Grounds | None = None) -> ClaimVerdict:
        """The verdict with its reasons; ``use_classifier`` also asks the policy's classifier;
        ``grounds``: what the session's read tools returned (a claim that only restates one of
        those states is none)."""
        if not text:
            return ClaimVerdict(())
        if len(text) > _MAX_TEXT_CHARS:  # claims open or close an answer; bound the work
            text = text[: _MAX_TEXT_CHARS // 2] + "\n" + text[-_MAX_TEXT_CHARS // 2:]
        classifier = self.classifier if use_classifier else None
        if classifier is not None and classifier.mode == INSTEAD:
            decided = classifier.classify(text, ())
            if decided is not None:
                return ClaimVerdict(decided, CLASSIFIER, None, len(rules.split_clauses(text)), decided_by=CLASSIFIER)
        language = language_of(text)
        if not self._reads(language):
            verdict = ClaimVerdict((), checked=False, reason=LANGUAGE, language=language)
            if classifier is not None:  # the policy's own judge may read it
                decided = classifier.classify(text, ())
                if decided is not None:
                    return ClaimVerdict(decided, CLASSIFIER, decided_by=CLASSIFIER, language=language)
            if use_judge and self.model_judge is not None:
                decided = self.model_judge(text)
                if decided is not None:
                    return ClaimVerdict(decided, MODEL_JUDGE if decided else None, decided_by=MODEL_JUDGE,
                                        language=language)
            return verdict
        verdict = self._rules(text, grounds)
        if language != ENGLISH:
            verdict = replace(verdict, language=language)
        if use_judge and self.model_judge is not None and verdict.borderline:
            decided = self.model_judge(text)
            if decided is not None:  # (else the rules' verdict stands: the judge fails open)
                return replace(verdict, categories=decided, rule=MODEL_JUDGE, decided_by=MODEL_JUDGE)
        if classifier is not None and classifier.mode != INSTEAD and (verdict.categories or classifier.mode != CONFIRM):
            decided = classifier.classify(text, verdict.categories)
            if decided is not None and decided != verdict.categories:
                return ClaimVerdict(decided, CLASSIFIER, None, verdict.clauses, verdict.findings, CLASSIFIER)
        return verdict

    def _reads(self, language: str) -> bool:
        """Whether the rules or the policy's patterns read answers in ``language``."""
        if language == ENGLISH or language == CHINESE:
            return True
        return any(lang.split("-")[0] == language for lang in self._languages)

    def _rules(self, text: str, grounds: Grounds | None) -> ClaimVerdict:
        found_in, clauses = rules.find(text, self._english, self._chinese, grounds)
        findings = tuple(found_in)
        if findings and findings[-1].claim:
            last = findings[-1]
            return ClaimVerdict((WRITE,), last.rule, last.clause, clauses, findings)
        found: set[str] = set()
        first_at = None
        for category, pattern, guard in self._patterns:
            if category in found:
                continue
            for match in pattern.finditer(text):
                if not _guarded(text, match.start(), match.group(0), guard):
                    found.add(category)
                    first_at = match.start() if first_at is None else min(first_at, match.start())
                    break
        if found:
            return ClaimVerdict(tuple(sorted(found)), PATTERN, _clause_at(text, first_at), clauses, findings, PATTERN)
        final = findings[-1] if findings else None
        return ClaimVerdict((), final.rule if final else None, final.clause if final else None, clauses, findings)


@contextlib.contextmanager
def classifier_everywhere() -> Iterator[None]:
    """Within the block, ``detect`` asks the policy's classifier too (replay; never the live processor)."""
    token = _classifier_everywhere.set(True)
    try:
        yield
    finally:
        _classifier_everywhere.reset(token)


def classifier_may_wait() -> bool:
    """Whether this code runs inside :func:`classifier_everywhere` (replay), where the
    classifier and the model judge may be waited for."""
    return _classifier_everywhere.get()


def _clause_at(text: str, offset: int | None) -> int | None:
    if offset is None:
        return None
    for position, clause in enumerate(rules.split_clauses(text.lower()), 1):
        if offset < clause.end:
            return position
    return None


# --- policy patterns ([claims.<lang>]): a match is no claim in a negated, conditional,
# future or question clause --------------------------------------------------------------
_EN_GUARD = re.compile(
    r"\b(?:not|never|no|nothing|none|nobody|cannot|can't|couldn't|unable|if|once|when|until|unless|"
    r"before|after|whether|will|would|should|could|can|may|might|need|needs|must)\b|n't\b",
    re.IGNORECASE,
)
_ZH_GUARD = re.compile(r"未|没有|尚未|还没|无法|不能|不会|将会|将于|将在|稍后|如果|若|一旦|待|请您|需要|是否|状态")
_CLAUSE_BREAK = re.compile(r"[.!?;,\n。！？；，—–]")
_SENTENCE_END = re.compile(r"[.!?\n。！？]")


def _guarded(text: str, start: int, matched: str, guard: re.Pattern[str]) -> bool:
    """True when the match sits in a negated, conditional, future or question clause."""
    clause_start = 0
    for brk in _CLAUSE_BREAK.finditer(text, max(0, start - 80), start):
        clause_start = brk.end()
    clause_start = max(clause_start, start - 80)
    if guard.search(text, clause_start, start) or guard.search(matched, 1):
        return True  # the match itself may hold a guard word ("已将无法..." cannot)
    end = _SENTENCE_END.search(text, start + len(matched))
    return end is not None and end.group(0) in "?？"
