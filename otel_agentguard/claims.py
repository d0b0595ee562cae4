"""Find the action claims in a final answer, computed in process.

A claim is a statement that the agent *did* something with a side effect
("your refund has been submitted", "已为您提交赔付申请"). A statement about
state ("your order is in transit", "目前在运输途中"), a plan ("I will cancel
it") or a negation ("I could not cancel it") is not a claim.

Patterns are grouped by language and by claim category; the category is what
``agentguard.final.claims`` records (so the answer text itself need not be
exported). English and Chinese ship built in; a policy may replace or add
languages (``[claims.<lang>]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

WRITE = "write"
CLAIM_CATEGORIES = (WRITE,)  # what a claim can assert; fake_completion checks "write" against tool contracts

_EN_VERBS = (
    r"submitted|refunded|reimbursed|cancell?ed|updated|modified|changed|sent|emailed|"
    r"booked|rebooked|rescheduled|reserved|issued|processed|placed|filed|created|deleted|"
    r"removed|notified|transferred|paid|applied|scheduled|ordered|credited|escalated|"
    r"completed|reset|approved|raised|opened|closed|shipped|returned"
)
# In the passive ("was placed", "is closed") many verbs describe a state, not an act of
# the agent; only these read as "somebody just did it".
_EN_PASSIVE_VERBS = (
    r"submitted|refunded|reimbursed|cancell?ed|updated|modified|changed|sent|emailed|"
    r"booked|rebooked|rescheduled|reserved|issued|processed|filed|deleted|removed|"
    r"notified|transferred|credited|escalated|reset|approved"
)
# Bounded: a run of adverbs is short in real text, and an unbounded run next to
# another would let a repetitive answer make matching quadratic.
_EN_ADVERBS = r"(?:(?:now|already|just|also|successfully)\s+){0,3}"
_EN_WRITE = (
    # "has been refunded", "have submitted", "I've also sent"
    rf"\b(?:has|have|'ve|had)\s+{_EN_ADVERBS}(?:been\s+)?{_EN_ADVERBS}(?:{_EN_VERBS})\b",
    # "I submitted", "we just sent", "I went ahead and cancelled"
    rf"\b(?:i|we)\s+{_EN_ADVERBS}(?:went\s+ahead\s+and\s+)?{_EN_ADVERBS}(?:{_EN_VERBS})\b",
    # "the refund was submitted", "your booking is now cancelled"
    rf"\b(?:is|are|was|were)\s+{_EN_ADVERBS}(?:{_EN_PASSIVE_VERBS})\b",
    rf"\bsuccessfully\s+(?:{_EN_VERBS})\b",
    rf"\b(?:{_EN_VERBS})\s+successfully\b",
)

_ZH_ACTIONS = (
    "提交|退款|退还|退回|赔付|取消|改签|通知|完成|发送|发出|寄出|预订|预定|订好|修改|更改|更新|"
    "办理|下单|支付|付款|转账|申请|创建|删除|处理|报修|登记|安排|重置|关闭|开通"
)
_ZH_ADVERBS = "(?:重新|全额|全部|顺利|成功|立即|马上|都)?"
_ZH_WRITE = (
    # 已提交 / 已经为您提交 / 已帮您成功退款 / 已将申请提交给财务 / 已重新为您预订
    rf"已(?:经)?{_ZH_ADVERBS}(?:(?:为|帮|给|替|向|将|把)[^，。！？；,.!?;\n]{{0,16}}?)?{_ZH_ADVERBS}(?:{_ZH_ACTIONS})",
    # 提交成功 / 退款成功
    rf"(?:{_ZH_ACTIONS})(?:已)?成功",
    rf"成功(?:为您|帮您|给您)?(?:{_ZH_ACTIONS})",
)

BUILTIN_PATTERNS: dict[str, dict[str, tuple[str, ...]]] = {
    "en": {WRITE: _EN_WRITE},
    "zh": {WRITE: _ZH_WRITE},
}

# A match preceded in its clause by one of these (or inside a question) is no claim.
_EN_GUARD = re.compile(
    r"\b(?:not|never|no|nothing|none|nobody|cannot|can't|couldn't|unable|if|once|when|until|unless|"
    r"before|after|whether|will|would|should|could|can|may|might|need|needs|must)\b|n't\b",
    re.IGNORECASE,
)
_ZH_GUARD = re.compile(r"未|没有|尚未|还没|无法|不能|不会|将会|将于|将在|稍后|如果|若|一旦|待|请您|需要|是否|状态")
_MAX_TEXT_CHARS = 64 * 1024
_CLAUSE_BREAK = re.compile(r"[.!?;:,\n。！？；，：—–]")
_SENTENCE_END = re.compile(r"[.!?\n。！？]")


class ClaimDetector:
    """Compiled claim patterns; ``detect(text)`` returns the sorted categories found."""

    __slots__ = ("_patterns",)

    def __init__(self, patterns: Mapping[str, Mapping[str, Iterable[str]]] | None = None):
        merged: dict[str, dict[str, tuple[str, ...]]] = {
            lang: dict(categories) for lang, categories in BUILTIN_PATTERNS.items()
        }
        for lang, categories in (patterns or {}).items():
            merged.setdefault(lang, {}).update({c: tuple(p) for c, p in categories.items()})
        compiled: list[tuple[str, re.Pattern[str], re.Pattern[str]]] = []
        for lang, categories in merged.items():
            guard = _ZH_GUARD if lang.startswith("zh") else _EN_GUARD
            for category, sources in categories.items():
                # One regex per pattern: a pattern may carry its own inline flags, like (?i).
                compiled.extend((category, re.compile(source, re.IGNORECASE), guard) for source in sources)
        self._patterns = tuple(compiled)

    def detect(self, text: str) -> tuple[str, ...]:
        if not text:
            return ()
        if len(text) > _MAX_TEXT_CHARS:  # claims open or close an answer; bound the work
            text = text[: _MAX_TEXT_CHARS // 2] + "\n" + text[-_MAX_TEXT_CHARS // 2:]
        found: set[str] = set()
        for category, pattern, guard in self._patterns:
            if category in found:
                continue
            for match in pattern.finditer(text):
                if not _guarded(text, match.start(), match.group(0), guard):
                    found.add(category)
                    break
        return tuple(sorted(found))


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
